// Package admin serves a small operator's page for one ledger: records
// counted in the database and the totals every gateway reported (see
// Reporter), a recent-activity chart, the most recently updated records
// with their replays, parked and stale claims (with a reconcile action
// when writes are allowed), runs stopped between steps (with a resolve
// action on a started step), job queues and dead-lettered jobs once listers
// are given, and a search by scope and key. The same handler serves
// /healthz and /metrics. The page reloads itself through a meta refresh,
// not a script.
//
//	h, err := admin.New(l, &admin.Options{Addr: addr, Metrics: m, Write: write, Token: token})
//	http.ListenAndServe(addr, h)
//
// Everything it shows comes from embedded templates and styles: no CDN,
// no script, works offline. Every value is escaped by html/template.
//
// # Access
//
// The page shows keys and stored results, and with Write it can change
// records, so it is closed by default to anything but loopback: with no
// Token, requests must arrive on a loopback address with a loopback Host
// (which also defeats DNS rebinding). With a Token, every request but
// /healthz must carry it, as "Authorization: Bearer TOKEN" (scrapers,
// scripts) or as the session cookie the /login form sets (browsers). New
// refuses an Addr that is not loopback without a Token.
//
// State-changing requests (POST) are refused unless Options.Write, are
// checked for cross-origin use (Sec-Fetch-Site / Origin), and must carry a
// form token bound to a cookie of the same browser.
package admin

import (
	"cmp"
	"context"
	"crypto/rand"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// MinTokenLen is the shortest Token accepted: 16 bytes, say 32 hex digits
// from `openssl rand -hex 16`.
const MinTokenLen = 16

// Options configures the page. A nil *Options means read-only, loopback
// only, no metrics and no jobs.
type Options struct {
	// Addr is the address the handler will be served on (host:port). When
	// its host is not a loopback address, New requires a Token. Leave it
	// empty if unknown: every request is checked for a loopback local
	// address anyway.
	Addr string
	// Token, when set, is required on every request except /healthz. At
	// least MinTokenLen bytes.
	Token string
	// Write enables the reconcile action (idem serve --admin-write).
	// Without it the page is read-only and refuses every POST but /login.
	Write bool
	// Metrics feeds the chart and /metrics, and the totals until some
	// process reports to the database (Reporter), which then gives the
	// totals of every gateway. Nil: the page shows only what the database
	// holds, and the chart says so.
	Metrics *metrics.Collector
	// Gatherer serves /metrics. Default: a registry holding Metrics plus
	// the Go runtime and process collectors; nil Metrics and nil Gatherer
	// make /metrics answer 404.
	Gatherer prometheus.Gatherer
	// DeadJobs lists dead-lettered jobs for their section; nil renders
	// "jobs not configured". The jobs package's extension point.
	DeadJobs DeadJobsFunc
	// JobQueues lists the job queues (paused or not, jobs by state) for
	// their section; nil leaves the section out.
	JobQueues JobQueuesFunc
	// PauseQueue, with Write, puts pause and resume buttons in the queues
	// section. Nil: no buttons.
	PauseQueue PauseQueueFunc
	// ListLimit bounds the recent, parked, stale and dead-job lists.
	// Default 50.
	ListLimit int
	// CountTimeout bounds the database counts and lists behind one page.
	// Default 5s.
	CountTimeout time.Duration
	// Logger receives one line per operator action. Default slog.Default().
	Logger *slog.Logger
	// HashKeys logs keys as idem.KeyHash (sha256:…) instead of the keys,
	// as the ledger does under Options.HashKeysInLogs (idem serve
	// --hash-keys).
	HashKeys bool
}

// DeadJob is one dead-lettered job, as the jobs section shows it.
type DeadJob struct {
	Queue     string
	ID        string
	Kind      string
	Key       string // the unique key; empty if none
	Attempts  int
	LastError string
	DiedAt    time.Time
	// Metadata is the job's metadata (jobs.EnqueueOpts.Metadata) as JSON,
	// and Partition its partition key; empty if none.
	Metadata, Partition string
}

// DeadJobsFunc lists up to limit dead-lettered jobs, most recent first.
type DeadJobsFunc func(ctx context.Context, limit int) ([]DeadJob, error)

type server struct {
	l        *idem.Ledger
	o        Options
	log      *slog.Logger
	tmpl     *template.Template
	secret   []byte // signs form tokens and session cookies; per process
	gatherer prometheus.Gatherer
	cop      *http.CrossOriginProtection
}

// New returns the page's handler, or an error when the options are unsafe
// or invalid: a non-loopback Addr without a Token, or a short Token.
func New(l *idem.Ledger, opts *Options) (http.Handler, error) {
	if l == nil {
		return nil, errors.New("admin: nil ledger")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if err := check(o); err != nil {
		return nil, err
	}
	o.ListLimit = cmp.Or(o.ListLimit, 50)
	o.CountTimeout = cmp.Or(o.CountTimeout, 5*time.Second)
	s := &server{l: l, o: o, log: cmp.Or(o.Logger, slog.Default()), secret: make([]byte, 32), cop: http.NewCrossOriginProtection()}
	rand.Read(s.secret)
	tmpl, err := template.New("").Funcs(funcs).ParseFS(templateFS, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("admin: templates: %w", err) // embedded: a build mistake
	}
	s.tmpl = tmpl
	s.gatherer = o.Gatherer
	if s.gatherer == nil && o.Metrics != nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(o.Metrics, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		s.gatherer = reg
	}
	return s.routes(), nil
}

// Handler is New for callers that cannot handle an error where they build
// their mux: with unsafe or invalid options, the handler it returns
// refuses every request with 500 and the reason, instead of serving.
func Handler(l *idem.Ledger, opts *Options) http.Handler {
	h, err := New(l, opts)
	if err != nil {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "idem admin refuses to serve: "+err.Error(), http.StatusInternalServerError)
		})
	}
	return h
}

// Validate reports what New would refuse o for, without a ledger: for
// command lines that check their flags before opening a database.
func (o *Options) Validate() error {
	if o == nil {
		return nil
	}
	return check(*o)
}

// check refuses options that would expose the page or cannot work.
func check(o Options) error {
	if o.Token != "" && len(o.Token) < MinTokenLen {
		return fmt.Errorf("admin: token is %d bytes; want at least %d", len(o.Token), MinTokenLen)
	}
	if o.Addr != "" && o.Token == "" && !loopbackAddr(o.Addr) {
		return fmt.Errorf("admin: %s is not a loopback address: set a token (--admin-token) or bind to 127.0.0.1", o.Addr)
	}
	if o.ListLimit < 0 || o.CountTimeout < 0 {
		return errors.New("admin: negative ListLimit or CountTimeout")
	}
	return nil
}

// loopbackAddr reports whether host:port (or a bare host) names only
// loopback interfaces. An empty host means all interfaces: not loopback.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	return loopbackHost(host)
}

func loopbackHost(host string) bool {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (s *server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /{$}", s.index)
	mux.HandleFunc("POST /reconcile", s.reconcile)
	mux.HandleFunc("POST /reconcile-step", s.reconcileStep)
	mux.HandleFunc("POST /queues", s.pauseQueue)
	mux.HandleFunc("GET /login", s.loginForm)
	mux.HandleFunc("POST /login", s.login)
	sub, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(sub)))
	if s.gatherer != nil {
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{}))
	}
	return s.guard(s.cop.Handler(mux))
}

// guard applies the access rules of the package comment and the security
// headers every answer carries.
func (s *server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		if r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		if s.o.Token == "" {
			if !loopbackRequest(r) {
				http.Error(w, "idem admin: no token is configured, so only loopback clients are served; set a token to serve other addresses", http.StatusForbidden)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		if strings.HasPrefix(r.URL.Path, "/login") || strings.HasPrefix(r.URL.Path, "/static/") || s.authorized(r) {
			next.ServeHTTP(w, r)
			return
		}
		if r.Method == http.MethodGet && strings.Contains(r.Header.Get("Accept"), "text/html") {
			http.Redirect(w, r, "/login", http.StatusSeeOther)
			return
		}
		h.Set("WWW-Authenticate", `Bearer realm="idem admin"`)
		http.Error(w, "idem admin: token required", http.StatusUnauthorized)
	})
}

// loopbackRequest reports whether r arrived on a loopback address and
// names a loopback host: a page served only to this machine, and not
// reachable through a DNS name an attacker controls.
func loopbackRequest(r *http.Request) bool {
	if la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if ta, ok := la.(*net.TCPAddr); ok && !ta.IP.IsLoopback() {
			return false
		}
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return loopbackHost(host)
}

func (s *server) healthz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	// One indexed read on the read path: on SQLite a ping of the writer
	// would wait behind any long write and report a busy ledger as down.
	if _, err := s.l.List(ctx, idemtype.ListFilter{Limit: 1}); err != nil {
		http.Error(w, "database unreachable", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintln(w, "ok")
}
