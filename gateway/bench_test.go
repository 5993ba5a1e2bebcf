package gateway_test

import (
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemdev/idem/gateway"
)

// BenchmarkGateway measures requests per second through the gateway with
// 32 concurrent clients, each request a new key (a claim and a completion
// per request), against a bare httputil.ReverseProxy in front of the same
// upstream. Run with -bench Gateway -benchtime 3s.
func BenchmarkGateway(b *testing.B) {
	upstream := serveQuietB(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"ch_1","amount":1000}`)
	}))
	u, _ := url.Parse(upstream)
	b.Run("bare-reverseproxy", func(b *testing.B) {
		rp := httputil.NewSingleHostReverseProxy(u)
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 256
		rp.Transport = t
		runClients(b, serveQuietB(b, rp))
	})
	for _, driver := range []string{"sqlite", "postgres"} {
		b.Run(driver, func(b *testing.B) {
			l := openLedger(b, driver)
			g, err := gateway.New(l, &gateway.Config{Upstream: u, Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			runClients(b, serveQuietB(b, g))
		})
	}
}

func runClients(b *testing.B, target string) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	client := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()
	var seq atomic.Int64
	b.SetParallelism(max(32/runtime.GOMAXPROCS(0), 1))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest("POST", target+"/charges", strings.NewReader(`{"amount":1000}`))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer bench")
			req.Header.Set("Idempotency-Key", "bench-"+strconv.FormatInt(seq.Add(1), 10))
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
}

func serveQuietB(b *testing.B, h http.Handler) string {
	srv := &http.Server{Handler: h}
	ln, err := newLoopbackListener()
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	b.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}
