package prove

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/fingerprint"
)

// The retry storm: a client whose timeout is shorter than the server's
// work. It gives up three times while the server keeps working (each
// retry to another server process, with the same key and the same body),
// then waits: the later attempts must get the replay, and the work must
// have happened once.
const (
	stormTimeout  = 100 * time.Millisecond
	stormWork     = 350 * time.Millisecond // longer than stormTimeouts × stormTimeout
	stormTimeouts = 3
	stormPatience = 30 * time.Second // the client's timeout after its first three
	stormAttempts = 50               // per operation, then the client gives up
)

func runRetryStorm(ctx context.Context, t *trial) error {
	s := spec{Role: roleServer, WorkMS: stormWork.Milliseconds(), LeaseMS: max(t.lease, 3*stormWork).Milliseconds()}
	var addrs []string
	var servers []*proc
	for range t.r.cfg.Workers {
		p, err := t.start(ctx, s, "")
		if err != nil {
			return err
		}
		servers = append(servers, p)
		e, err := p.expect(ctx, evListening)
		if err != nil {
			return err
		}
		addrs = append(addrs, e.Addr)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, DialContext: (&net.Dialer{}).DialContext}}
	sem := make(chan struct{}, 4*t.r.cfg.Workers)
	var wg sync.WaitGroup
	for i, key := range t.shuffled() {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			t.stormOp(ctx, client, i, key, addrs)
		})
	}
	wg.Wait()
	client.CloseIdleConnections()
	var errs []error
	for _, p := range servers {
		p.stdin.Close() // the servers finish what they work on, then exit
	}
	for _, p := range servers {
		errs = append(errs, p.wait(ctx, false))
	}
	if t.r.cfg.NoGuard {
		return errors.Join(errs...)
	}
	ran := 0
	for _, e := range lastOKs(t.h.snapshot(), setOf(t.keys)) {
		if !e.Replay {
			ran++
		}
	}
	if ran > 0 {
		t.note("%d operations were answered by a fresh execution rather than a replay (a server lost its lease and another redid the work; the first was fenced)", ran)
	}
	return errors.Join(errs...)
}

func setOf(keys []string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}

// stormOp is one client's operation: the same request, again and again,
// until it gets an answer.
func (t *trial) stormOp(ctx context.Context, client *http.Client, i int, key string, addrs []string) {
	proc := fmt.Sprintf("client %d", i)
	body := request(t.scope, key)
	for a := range stormAttempts {
		if ctx.Err() != nil {
			return
		}
		timeout := stormTimeout
		if a >= stormTimeouts {
			timeout = stormPatience
		}
		url := fmt.Sprintf("http://%s/op?key=%s", addrs[(i+a)%len(addrs)], key)
		t.record(Event{Proc: proc, Op: key, Type: Invoke})
		status, hdr, answer, err := post(ctx, client, url, body, timeout)
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			t.record(Event{Proc: proc, Type: Unknown, Err: fmt.Sprintf("client gave up after %v", timeout)})
		case err != nil:
			t.record(Event{Proc: proc, Type: Unknown, Err: err.Error()})
		case status == http.StatusOK:
			t.record(Event{Proc: proc, Type: OK, Value: answer, Replay: hdr.Get("Idempotent-Replayed") == "true"})
			return
		case status == http.StatusConflict:
			t.record(Event{Proc: proc, Type: Fail, Kind: failInFlight, Err: answer})
		case status == http.StatusUnprocessableEntity:
			t.record(Event{Proc: proc, Type: Fail, Kind: failMismatch, Err: answer})
			return
		default:
			t.record(Event{Proc: proc, Type: Unknown, Err: fmt.Sprintf("%d %s", status, answer)})
		}
	}
}

// post sends one request with its own timeout and reads the answer.
func post(ctx context.Context, client *http.Client, url string, body []byte, timeout time.Duration) (int, http.Header, string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, "", err
	}
	return resp.StatusCode, resp.Header, string(b), nil
}

// runServer is the storm's server: POST /op?key=K does WorkMS of work
// under a claim and answers with the result. It serves until stdin ends,
// then finishes the requests it is working on.
func (w *worker) runServer(ctx context.Context) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(w.serveOp), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	w.out.emit(wireEvent{Ev: evListening, Addr: ln.Addr().String()})
	io.Copy(io.Discard, w.in)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return srv.Shutdown(sctx)
}

func (w *worker) serveOp(rw http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	req, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, 1<<16))
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	fp, err := fingerprint.Sum(req)
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	// The server keeps working when the client gives up.
	ctx := context.WithoutCancel(r.Context())
	work := time.Duration(w.s.WorkMS) * time.Millisecond
	if w.s.NoGuard {
		body := w.newBody(key)
		time.Sleep(work)
		if err := w.commitLocal(ctx, nil, key, body); err != nil {
			http.Error(rw, err.Error(), http.StatusInternalServerError)
			return
		}
		rw.Write([]byte(body))
		return
	}
	op := w.op(key)
	op.Fingerprint = fp
	for {
		c, err := w.l.Claim(ctx, op)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusInternalServerError)
			return
		}
		switch c.Outcome {
		case idem.Acquired, idem.Reclaimed:
			body := w.newBody(key)
			time.Sleep(work)
			if err := w.commitLocal(ctx, c, key, body); err != nil {
				// Lease lost: the effect rolled back; a retry finds out who
				// finished. Any other error: the commit's outcome is unknown.
				http.Error(rw, err.Error(), http.StatusServiceUnavailable)
				return
			}
			rw.Write([]byte(body))
			return
		case idem.Replay:
			rw.Header().Set("Idempotent-Replayed", "true")
			rw.Write(c.Result.Body)
			return
		case idem.InFlight:
			// Wait for the holder, for as long as the client waits.
			select {
			case <-r.Context().Done():
				return
			case <-time.After(25 * time.Millisecond):
			}
		case idem.Mismatch:
			http.Error(rw, "key reused with a different request", http.StatusUnprocessableEntity)
			return
		default:
			http.Error(rw, c.Outcome.String(), http.StatusConflict)
			return
		}
	}
}
