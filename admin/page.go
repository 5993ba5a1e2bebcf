package admin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/metrics"
)

// previewBytes is how much of a stored body the page shows; countCap
// bounds each database count, as the metrics gauges do.
const (
	previewBytes = 2048
	countCap     = metrics.DefaultCountLimit
)

// page is everything index.html renders.
type page struct {
	Write    bool
	Token    bool // a token guards the page (show "log out" hints)
	HashKeys bool // recent keys are shown as idem.KeyHash
	CSRF     string
	Driver   string
	Limit    int
	Error    string // an action that failed
	Resolved bool   // the searched record was just resolved
	Confirm  *confirm
	// StepConfirm is a step resolution under review (runs section).
	StepConfirm *stepConfirm

	Counts   *idemtype.OpenCounts
	CountErr string
	Totals   *metrics.Totals
	Chart    *chart
	// DB is what the database counts for every gateway (drivers with
	// driver.Activity); SourcesMore is how many reporting processes the
	// page does not list.
	DB          *dbTotals
	SourcesMore int
	Recent      recentSection
	// Refresh is the meta refresh period in seconds (0: none); Refreshes
	// the choices offered, RefreshOn whether the links are shown.
	Refresh   int
	Refreshes []int
	RefreshOn bool

	Parked, Stale       []row
	ParkedErr, StaleErr string
	Runs                []runRow
	RunsErr             string
	Jobs                jobsSection
	Queues              queuesSection
	Search              search
}

type jobsSection struct {
	Configured bool
	Items      []DeadJob
	Err        string
}

type search struct {
	Asked      bool
	Scope, Key string
	Found      bool
	Err        string
	Record     row
}

// confirm is what a reconcile would store, shown before it is stored.
type confirm struct {
	Scope, Key, As, Status, ContentType, Body string
	Force                                     bool
	Stores                                    bool // succeeded or failed: a result is stored
	HTTP                                      bool // made by the HTTP layer: the result is a response
	BodyBytes                                 int
}

// row is a record as the page shows it.
type row struct {
	idemtype.Record
	Note      string
	Live      bool // in progress under a live lease: reconcile needs force
	CanSettle bool // parked or in progress: the reconcile form applies
	Body      string
	BodyCut   bool
	BodyBin   bool
}

func newRow(r idemtype.Record) row {
	out := row{Record: r, Note: note(r)}
	out.Live = r.State == idemtype.StateInProgress && !r.Stale()
	out.CanSettle = r.State == idemtype.StateParked || r.State == idemtype.StateInProgress
	if b := r.Body; len(b) > 0 {
		p := b
		if len(p) > previewBytes {
			cut := previewBytes
			for cut > previewBytes-utf8.UTFMax && !utf8.RuneStart(b[cut]) {
				cut-- // do not split a rune
			}
			p, out.BodyCut = b[:cut], true
		}
		if utf8.Valid(p) {
			out.Body = string(p)
		} else {
			out.BodyBin = true
		}
	}
	return out
}

func note(r idemtype.Record) string {
	switch r.State {
	case idemtype.StateInProgress:
		if r.Stale() {
			return "stale: lease ended " + since(r.LeaseUntil, r.Now)
		}
		return "lease ends " + since(r.LeaseUntil, r.Now)
	case idemtype.StateSucceeded, idemtype.StateFailed:
		if r.ExpiresAt.After(r.Now) {
			return "replayed until " + stamp(r.ExpiresAt)
		}
		return "retention ended; prune makes it a tombstone"
	case idemtype.StateTombstone:
		return "late retries refused until " + stamp(r.TombstoneUntil)
	case idemtype.StateParked:
		return "outcome unknown: waits for an operator"
	case idemtype.StateReleased:
		return "free: the next claim runs it"
	}
	return ""
}

func since(t, now time.Time) string {
	d := t.Sub(now).Round(time.Second)
	if d >= 0 {
		return "in " + d.String()
	}
	return (-d).String() + " ago"
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// show prints a scope or key so that nothing can hide in it: an empty one
// as "", one with unprintable or edge spaces Go-quoted. html/template
// escapes the result.
func show(s string) string {
	if s == "" || s != strings.TrimSpace(s) {
		return strconv.Quote(s)
	}
	for _, r := range s {
		if !strconv.IsPrint(r) || r == utf8.RuneError {
			return strconv.Quote(s)
		}
	}
	return s
}

// rowsArg and rowArg carry the page into the sub-templates for lists and
// reconcile forms.
type (
	rowsArg struct {
		Page page
		Rows []row
	}
	rowArg struct {
		Page page
		Row  row
	}
)

var funcs = template.FuncMap{
	"withRows": func(p page, rows []row) rowsArg { return rowsArg{p, rows} },
	"withRow":  func(p page, r row) rowArg { return rowArg{p, r} },
	"withStep": func(p page, st stepRow) stepArg { return stepArg{p, st} },
	"show":     show,
	"count": func(n int64) string {
		if n >= countCap {
			return strconv.FormatInt(n, 10) + "+"
		}
		return strconv.FormatInt(n, 10)
	},
	"stamp": stamp,
	"age":   age,
	// refreshOf is the meta refresh period of the page being rendered, for
	// the layout (0 for pages without one).
	"refreshOf": func(v any) int {
		if p, ok := v.(page); ok {
			return p.Refresh
		}
		return 0
	},
	"short": func(s string) string {
		if len(s) > 28 {
			return s[:28] + "…"
		}
		return s
	},
}

func (s *server) render(w http.ResponseWriter, status int, name string, data any) {
	var buf bytes.Buffer
	if err := s.tmpl.ExecuteTemplate(&buf, name, data); err != nil {
		s.log.Error("admin: rendering "+name, "err", err)
		http.Error(w, "idem admin: rendering failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

func (s *server) index(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p := s.build(w, r, q.Get("scope"), q.Get("key"), q.Has("key"))
	p.Resolved = q.Has("resolved") && p.Search.Found
	if !q.Has("key") { // no refresh under a search result: it would reload it for nothing
		p.RefreshOn, p.Refreshes, p.Refresh = true, refreshChoices, s.refresh(q.Get("refresh"))
	}
	s.render(w, http.StatusOK, "index.html", p)
}

// build gathers the page: counts, totals, chart, lists and the search.
func (s *server) build(w http.ResponseWriter, r *http.Request, scope, key string, asked bool) page {
	ctx, cancel := context.WithTimeout(r.Context(), s.o.CountTimeout)
	defer cancel()
	p := page{Write: s.o.Write, Token: s.o.Token != "", HashKeys: s.o.HashKeys, Driver: s.l.Driver().Name(), Limit: s.o.ListLimit}
	if s.o.Write {
		p.CSRF = s.csrfToken(w, r)
	}
	s.activity(ctx, &p)
	if p.DB == nil {
		if n, err := s.l.Count(ctx, countCap); err != nil {
			p.CountErr = err.Error()
		} else {
			p.Counts = &n
		}
	}
	if m := s.o.Metrics; m != nil {
		t := m.Totals()
		p.Totals = &t
		p.Chart = newChart(m.History(), m.HistoryStep())
	}
	p.Parked, p.ParkedErr = s.list(ctx, idemtype.ListFilter{State: idemtype.StateParked, Limit: s.o.ListLimit})
	p.Stale, p.StaleErr = s.list(ctx, idemtype.ListFilter{Stale: true, Limit: s.o.ListLimit})
	p.Runs, p.RunsErr = s.runs(ctx)
	if s.o.JobQueues != nil {
		p.Queues.Configured, p.Queues.CanPause = true, s.o.Write && s.o.PauseQueue != nil
		qs, err := s.o.JobQueues(ctx)
		if err != nil {
			p.Queues.Err = err.Error()
		}
		p.Queues.Items = qs
	}
	if s.o.DeadJobs != nil {
		p.Jobs.Configured = true
		jobs, err := s.o.DeadJobs(ctx, s.o.ListLimit)
		if err != nil {
			p.Jobs.Err = err.Error()
		}
		p.Jobs.Items = jobs
	}
	if asked {
		p.Search = search{Asked: true, Scope: scope, Key: key}
		rec, err := s.l.Get(ctx, scope, key)
		switch {
		case errors.Is(err, idem.ErrNotFound):
		case err != nil:
			p.Search.Err = err.Error()
		default:
			p.Search.Found, p.Search.Record = true, newRow(rec)
		}
	}
	return p
}

func (s *server) list(ctx context.Context, f idemtype.ListFilter) ([]row, string) {
	recs, err := s.l.List(ctx, f)
	if err != nil {
		return nil, err.Error()
	}
	rows := make([]row, len(recs))
	for i, rec := range recs {
		rows[i] = newRow(rec)
	}
	return rows, ""
}

// maxFormBody bounds a reconcile form: the result body plus the fields.
const maxFormBody = 1<<20 + 16<<10

// writeForm admits a state-changing POST, or answers it and returns false:
// allowed only with Options.Write (and enabled, when the action needs more
// than Write), a form of at most limit bytes that parses, and a valid form
// token. The cross-origin check runs before, for every POST.
func (s *server) writeForm(w http.ResponseWriter, r *http.Request, enabled bool, limit int64, what string) bool {
	if !s.o.Write || !enabled {
		http.Error(w, "idem admin is read-only: start it with --admin-write to "+what+" from the page", http.StatusForbidden)
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	if err := r.ParseForm(); err != nil {
		http.Error(w, "idem admin: bad form: "+err.Error(), http.StatusBadRequest)
		return false
	}
	if !s.csrfOK(r) {
		http.Error(w, "idem admin: the form token is missing or stale; reload the page and try again", http.StatusForbidden)
		return false
	}
	return true
}

func (s *server) reconcile(w http.ResponseWriter, r *http.Request) {
	if !s.writeForm(w, r, true, maxFormBody, "reconcile") {
		return
	}
	scope, key := r.PostForm.Get("scope"), r.PostForm.Get("key")
	fail := func(status int, msg string) {
		p := s.build(w, r, scope, key, true)
		p.Error = msg
		s.render(w, status, "index.html", p)
	}
	var as idemtype.State
	switch r.PostForm.Get("as") {
	case "succeeded":
		as = idemtype.StateSucceeded
	case "failed":
		as = idemtype.StateFailed
	case "release":
		as = idemtype.StateReleased
	default:
		fail(http.StatusBadRequest, "choose succeeded, failed or release")
		return
	}
	status := 0
	if v := strings.TrimSpace(r.PostForm.Get("status")); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			fail(http.StatusBadRequest, fmt.Sprintf("status %q: want a number", v))
			return
		}
		status = n
	}
	body := []byte(r.PostForm.Get("body"))
	var header http.Header
	if ct := strings.TrimSpace(r.PostForm.Get("content_type")); ct != "" {
		header = http.Header{"Content-Type": {ct}}
	}
	force := r.PostForm.Get("force") == "on"
	rec, err := s.l.Get(r.Context(), scope, key)
	if errors.Is(err, idem.ErrNotFound) {
		fail(http.StatusNotFound, "no record for this scope and key")
		return
	}
	if err != nil {
		fail(http.StatusInternalServerError, err.Error())
		return
	}
	switch {
	case rec.State != idemtype.StateParked && rec.State != idemtype.StateInProgress:
		fail(http.StatusConflict, "refused: the record is "+string(rec.State)+", not parked or in progress")
		return
	case rec.State == idemtype.StateInProgress && !rec.Stale() && !force:
		fail(http.StatusConflict, liveLease(rec))
		return
	}
	res, err := Settlement{As: as, Status: status, Header: header, Body: body, Force: force}.Resolution(rec)
	if err != nil {
		fail(http.StatusBadRequest, "not resolved: "+err.Error())
		return
	}
	if r.PostForm.Get("confirm") != "yes" {
		// Show what would be stored; nothing is written until the
		// operator confirms.
		p := s.build(w, r, scope, key, true)
		p.Confirm = &confirm{Scope: scope, Key: key, As: string(as), ContentType: header.Get("Content-Type"), Body: string(body),
			Force: force, Stores: as != idemtype.StateReleased, HTTP: IsHTTPRecord(rec), BodyBytes: len(body)}
		if p.Confirm.Stores {
			p.Confirm.Status = strconv.Itoa(status)
		}
		s.render(w, http.StatusOK, "index.html", p)
		return
	}
	rec, err = s.l.Resolve(r.Context(), scope, key, res)
	switch {
	case errors.Is(err, idem.ErrNotFound):
		fail(http.StatusNotFound, "no record for this scope and key")
		return
	case errors.Is(err, idem.ErrLiveLease):
		fail(http.StatusConflict, liveLease(rec))
		return
	case err != nil && rec.State != "":
		fail(http.StatusConflict, "refused: the record is "+string(rec.State)+", not parked or in progress")
		return
	case err != nil:
		fail(http.StatusInternalServerError, err.Error())
		return
	}
	s.log.InfoContext(r.Context(), "operator resolved a claim from the admin page", "scope", scope, "key", s.logKey(key),
		"fingerprint", rec.Fingerprint, "attempt", rec.Attempt, "as", string(as), "status", status,
		"body_bytes", len(body), "force", force, "remote", r.RemoteAddr)
	http.Redirect(w, r, "/?"+url.Values{"scope": {scope}, "key": {key}, "resolved": {""}}.Encode(), http.StatusSeeOther)
}

// logKey is key as an operator action's log line shows it: hashed with
// Options.HashKeys, as the ledger logs keys.
func (s *server) logKey(key string) string {
	if s.o.HashKeys {
		return idem.KeyHash(key)
	}
	return key
}

// liveLease is the refusal of a reconcile under a live lease.
func liveLease(rec idemtype.Record) string {
	return "refused: the claim is in progress under a live lease until " + stamp(rec.LeaseUntil) + "; its holder may still be working. Tick force only if you know it is gone."
}
