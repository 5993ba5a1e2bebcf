package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemdev/idem/gateway"
)

// gatewayRows: keyed POSTs through the gateway (a new key each, so each is
// a claim, the upstream call and a completion) against the same POSTs
// through a bare httputil.ReverseProxy, in front of the same upstream. The
// upstream, both proxies and the load all run in this process on loopback;
// each side gets c keep-alive connections.
func (r *runner) gatewayRows(ctx context.Context) ([]Result, error) {
	upstream, stop, err := serve("upstream", http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		io.Copy(io.Discard, req.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		w.Write(body)
	}))
	if err != nil {
		return nil, err
	}
	defer stop()
	u, _ := url.Parse(upstream)
	var out []Result
	for _, c := range r.o.Concurrency {
		res, err := r.gatewayRow(ctx, u, c)
		if err != nil {
			return out, err
		}
		out = append(out, res...)
	}
	return out, nil
}

func (r *runner) gatewayRow(ctx context.Context, upstream *url.URL, c int) ([]Result, error) {
	idemOp, bare, stopSides, err := r.gatewaySides(ctx, upstream, c)
	if err != nil {
		return nil, err
	}
	defer stopSides()

	hl, scope, doneHand, err := r.openLedger(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer doneHand()
	safe, stopSafe, err := r.httpLoad("safe-proxy", safeProxy(upstream, handLedger{db: r.handDB(hl), drv: hl.Driver().Name()}, scope), c)
	if err != nil {
		return nil, err
	}
	defer stopSafe()

	var runs [][]Result
	err = r.repeat(func(int) error {
		r.progress("gateway keyed POST, %d connections: idem gateway, bare httputil.ReverseProxy, hand-written safe proxy", c)
		var rss float64
		st, err := compare(ctx, c, r.o.Duration,
			side{name: "idem", op: idemOp, before: resetPeakRSS, after: func() { rss = max(rss, peakRSS()) }},
			side{name: "baseline", op: bare},
			side{name: "safe-proxy", op: safe})
		if err != nil {
			return fmt.Errorf("keyed POSTs, %d connections: %w", c, err)
		}
		res := newResult(GroupGateway, "gateway keyed POST", "bare httputil.ReverseProxy, same upstream",
			r.db, c, r.o.Duration, st[0], st[1], true)
		if rss > 0 {
			res.PeakRSSMegabytes = rss
			res.Note = fmt.Sprintf("peak RSS of the whole bench process (load generator and upstream included) while the gateway ran: %.0f MiB", rss)
		}
		vsSafe := newResult(GroupGateway, "gateway keyed POST vs safe proxy",
			"hand-written safe proxy: httputil.ReverseProxy, an INSERT of the claim before forwarding, an UPDATE storing the answer before answering",
			r.db, c, r.o.Duration, st[0], st[2], true)
		runs = append(runs, []Result{res, vsSafe})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return medians(runs), nil
}

// safeProxy is the gateway's hand-written baseline: what a careful
// programmer writes for the same guarantee with httputil.ReverseProxy and
// the ledger's table. The claim is inserted before forwarding (a taken key
// is answered 409, with no replay: the baseline's requests are all new);
// the upstream's answer is read whole and stored, fenced, before it is
// sent on.
func safeProxy(upstream *url.URL, h handLedger, scope string) http.Handler {
	type claimKey struct{}
	type claim struct {
		key              string
		attempt, leaseID int64
	}
	rp := bareProxy(upstream)
	rp.ModifyResponse = func(resp *http.Response) error {
		c := resp.Request.Context().Value(claimKey{}).(claim)
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		if err := h.complete(resp.Request.Context(), scope, c.key, c.attempt, c.leaseID, resp.StatusCode, b); err != nil {
			return err
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
		return nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		key := req.Header.Get("Idempotency-Key")
		attempt, leaseID, err := h.claim(req.Context(), scope, key)
		if err != nil {
			http.Error(w, "claim: "+err.Error(), http.StatusConflict)
			return
		}
		rp.ServeHTTP(w, req.WithContext(context.WithValue(req.Context(), claimKey{}, claim{key, attempt, leaseID})))
	})
}

// gatewaySides serves keyed POSTs to upstream through idem's gateway on a
// ledger of its own and through a bare httputil.ReverseProxy, each for c
// connections; stop ends both.
func (r *runner) gatewaySides(ctx context.Context, upstream *url.URL, c int) (idemOp, bare opFunc, stop func(), err error) {
	var stops []func()
	stopAll := func() {
		for _, f := range slices.Backward(stops) {
			f()
		}
	}
	defer func() {
		if err != nil {
			stopAll()
		}
	}()
	rp := bareProxy(upstream)
	bare, stopBare, err := r.httpLoad("baseline", rp, c)
	if err != nil {
		return nil, nil, nil, err
	}
	stops = append(stops, stopBare)
	l, _, done, err := r.openLedger(ctx, nil)
	if err != nil {
		return nil, nil, nil, err
	}
	stops = append(stops, done)
	g, err := gateway.New(l, &gateway.Config{Upstream: upstream, Logger: quiet, Transport: upstreamTransport()})
	if err != nil {
		return nil, nil, nil, err
	}
	idemOp, stopIdem, err := r.httpLoad("idem", g, c)
	if err != nil {
		return nil, nil, nil, err
	}
	stops = append(stops, stopIdem)
	return idemOp, bare, stopAll, nil
}

// upstreamTransport is how both proxies reach the upstream: enough idle
// connections that neither side dials under load.
func upstreamTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 1024
	return t
}

// httpLoad serves h on loopback and returns an operation that sends it a
// keyed POST (a new key each time), each worker on its own keep-alive
// connection.
func (r *runner) httpLoad(label string, h http.Handler, c int) (opFunc, func(), error) {
	target, stop, err := serve(label, h)
	if err != nil {
		return nil, nil, err
	}
	op, closeIdle := keyedPOSTs(target, c, nil)
	return op, func() { closeIdle(); stop() }, nil
}

// keyedPOSTs returns an operation that sends target a keyed POST (a new
// key each time, with the headers extra besides), each worker on its own
// keep-alive connection, and a func that closes the idle connections.
func keyedPOSTs(target string, c int, extra http.Header) (opFunc, func()) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = c
	t.MaxConnsPerHost = c
	client := &http.Client{Transport: t, Timeout: 30 * time.Second}
	prefix := name("k") + "-"
	var seq atomic.Int64
	op := one(func(ctx context.Context, w int, _ int64) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, target+"/charges", strings.NewReader(`{"amount":1000,"currency":"eur"}`))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", prefix+strconv.FormatInt(seq.Add(1), 10))
		req.Header.Set("Authorization", "Bearer bench") // keys are scoped by credential; none is refused
		for k, v := range extra {
			req.Header[k] = v
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated || resp.Header.Get("Idempotent-Replayed") != "" {
			return fmt.Errorf("status %d (replayed %q) for a new key: %w", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), errUnexpected)
		}
		return nil
	})
	return op, t.CloseIdleConnections
}

// bareProxy is an httputil.ReverseProxy in front of upstream on the
// bench's upstream transport, its errors unlogged: the bare side of the
// gateway rows and the base of the safe proxy.
func bareProxy(upstream *url.URL) *httputil.ReverseProxy {
	rp := httputil.NewSingleHostReverseProxy(upstream)
	rp.Transport = upstreamTransport()
	rp.ErrorLog = log.New(io.Discard, "", 0)
	return rp
}

// serve runs h on a loopback port until stop. Its goroutines carry the
// profile label server=label.
func serve(label string, h http.Handler) (base string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ErrorLog: log.New(io.Discard, "", 0), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go pprof.Do(context.Background(), pprof.Labels("server", label), func(context.Context) {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "bench: serve:", err)
		}
	})
	return "http://" + ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	}, nil
}
