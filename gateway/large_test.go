package gateway_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/gateway"
)

// 100 guarded requests at once whose answers are 1 MiB each (the default
// MaxResponse): each is stored and replayed byte for byte. Every answer is
// different, half declare their length and half are chunked, so a stored
// response's buffer reused before its completion was written, or shared
// between two requests, shows as a wrong replay.
func TestLargeResponsesConcurrent(t *testing.T) {
	t.Parallel()
	const size = 1 << 20
	n := 100
	if raceEnabled {
		// The race detector's 5-10x, with a 100 MiB wave per driver, runs the
		// ledger's writes past their 10 s bound on a loaded machine; the
		// concurrency that reuses buffers shows with fewer.
		n = 10
	}
	answer := func(i int) []byte { return bytes.Repeat([]byte(fmt.Sprintf("%07d\n", i)), size/8) }
	for _, driver := range []string{"sqlite", "postgres"} { // one at a time: each is 100 MiB in flight
		t.Run(driver, func(t *testing.T) { largeResponses(t, openLedger(t, driver), n, size, answer) })
	}
}

func largeResponses(t *testing.T, l *idem.Ledger, n, size int, answer func(int) []byte) {
	{
		up := newUpstream()
		up.handle = func(w http.ResponseWriter, r *http.Request) {
			i, _ := strconv.Atoi(r.URL.Query().Get("i"))
			b := answer(i)
			w.Header().Set("Content-Type", "application/octet-stream")
			if i%2 == 0 {
				w.Header().Set("Content-Length", strconv.Itoa(len(b)))
				w.WriteHeader(http.StatusCreated)
				w.Write(b)
				return
			}
			w.WriteHeader(http.StatusCreated)
			for off := 0; off < len(b); off += 100_000 { // chunked: no Content-Length
				w.Write(b[off:min(off+100_000, len(b))])
				w.(http.Flusher).Flush()
			}
		}
		gw := newGateway(t, l, serveQuiet(t, up).URL, &gateway.Config{Timeout: 5 * time.Minute}) // a loaded -race run is slow, not wrong
		client := &http.Client{Transport: http.DefaultClient.Transport}
		wave := func(replay bool) {
			var wg sync.WaitGroup
			errs := make(chan error, n)
			for i := range n {
				wg.Go(func() {
					req, _ := http.NewRequest("POST", gw+"/large?i="+strconv.Itoa(i), bytes.NewReader([]byte(`{}`)))
					req.Header.Set("Content-Type", "application/json")
					req.Header.Set("Idempotency-Key", "large-"+strconv.Itoa(i))
					resp, err := client.Do(req)
					// A loaded machine (-race) may answer 503 (the ledger
					// was slow to claim: nothing done) or, on the replay,
					// 409 (still recording): retried as a client would.
					for try := 0; err == nil && (resp.StatusCode == 503 || resp.StatusCode == 409) && try < 30; try++ {
						resp.Body.Close()
						time.Sleep(time.Second)
						req.Body = io.NopCloser(bytes.NewReader([]byte(`{}`)))
						resp, err = client.Do(req)
					}
					if err != nil {
						errs <- err
						return
					}
					defer resp.Body.Close()
					b, err := io.ReadAll(resp.Body)
					replayed := resp.Header.Get("Idempotent-Replayed") == "true"
					if err != nil || resp.StatusCode != http.StatusCreated || replayed != replay || !bytes.Equal(b, answer(i)) {
						errs <- fmt.Errorf("key %d (replay %v): status %d, replayed %v, %d bytes, equal %v, %v",
							i, replay, resp.StatusCode, replayed, len(b), bytes.Equal(b, answer(i)), err)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		}
		wave(false)
		if t.Failed() {
			return
		}
		wave(true)
		for i := range n {
			if c := up.count("large-" + strconv.Itoa(i)); c != 1 {
				t.Errorf("key %d reached the upstream %d times", i, c)
			}
		}
	}
}
