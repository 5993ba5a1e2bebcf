package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/crashpoint"
	"github.com/idemdev/idem/outbox"
)

// A relay killed after the receiver answered but before the answer was
// recorded delivers again after its lease, with the same key; the receiver
// that honours keys applies each message once.
func TestRelayCrashAfterDeliveryRedeliversSameKey(t *testing.T) {
	forEachDriver(t, func(t *testing.T, url string) {
		ctx := context.Background()
		rcv := newReceiver(t)
		l := openLedger(t, url)
		ob := newOutbox(t, l)
		var ids []string
		for i := range 3 {
			ids = append(ids, add(t, ob, outbox.Message{ID: fmt.Sprintf("msg-%d", i), URL: rcv.URL, Body: []byte(`{"n":1}`)}))
		}

		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"="+url, crashpoint.EnvVar+"="+crashpoint.AfterDelivery+":2")
		out, err := cmd.CombinedOutput()
		ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
		if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("relay was not killed at the crash point: %v\n%s", err, out)
		}
		calls, _ := rcv.snapshot()
		if len(calls) < 2 {
			t.Fatalf("before the crash the receiver saw %v, want two deliveries", calls)
		}

		if err := ob.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer ob.Stop(ctx)
		waitFor(t, 30*time.Second, "all delivered", func() bool {
			for _, id := range ids {
				st, err := ob.Status(ctx, id)
				if err != nil || len(st) != 1 || st[0].State != idemtype.JobCompleted {
					return false
				}
			}
			return true
		})
		calls, effects := rcv.snapshot()
		redelivered := 0
		for _, id := range ids {
			if effects[id] != 1 {
				t.Errorf("message %s: %d effects, want 1", id, effects[id])
			}
			if calls[id] > 1 {
				redelivered++
			}
		}
		if redelivered == 0 {
			t.Fatalf("no message was delivered twice (calls %v): the crash did not hit between delivery and record", calls)
		}
		st, _ := ob.Status(ctx, ids[1])
		if st[0].Outcome == nil || st[0].Outcome.Status != 200 || st[0].Outcome.Body != `{"ok":true}` {
			t.Fatalf("recorded outcome %+v", st[0].Outcome)
		}
	})
}

// One message to 4,300 recipients in chunks of 500 is 9 deliveries, each
// with its own key; chunk 3 fails once and is the only one sent again.
func TestFanOutRetriesOnlyTheFailedChunk(t *testing.T) {
	forEachDriver(t, func(t *testing.T, url string) {
		ctx := context.Background()
		rcv := newReceiver(t)
		// Chunk 3 fails its whole first attempt (the relay's client sends
		// it three times), then succeeds on the job's second attempt.
		rcv.fail = func(key string, call int) int {
			if strings.HasSuffix(key, "/3") && call <= 3 {
				return http.StatusServiceUnavailable
			}
			return 0
		}
		ob := newOutbox(t, openLedger(t, url))
		tokens := make([]string, 4300)
		for i := range tokens {
			tokens[i] = fmt.Sprintf("device-%05d", i)
		}
		id := add(t, ob, outbox.Message{ID: "push-1", URL: rcv.URL, Body: []byte(`{"title":"hi"}`), Recipients: tokens, ChunkSize: 500})
		if err := ob.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer ob.Stop(ctx)
		var st []outbox.Delivery
		waitFor(t, 30*time.Second, "all chunks delivered", func() bool {
			st, _ = ob.Status(ctx, id)
			for _, d := range st {
				if d.State != idemtype.JobCompleted {
					return false
				}
			}
			return len(st) == 9
		})
		calls, effects := rcv.snapshot()
		for n := 1; n <= 9; n++ {
			key := fmt.Sprintf("push-1/%d", n)
			want := 1
			if n == 3 {
				want = 4
			}
			if calls[key] != want || effects[key] != 1 {
				t.Errorf("chunk %d: %d calls, %d effects; want %d and 1", n, calls[key], effects[key], want)
			}
			if st[n-1].Key != key {
				t.Errorf("status %d is %s, want %s", n-1, st[n-1].Key, key)
			}
		}
		if st[2].Attempts < 2 || !strings.Contains(st[2].LastError, "503") {
			t.Errorf("chunk 3 status: %+v", st[2])
		}
		seen := map[string]int{}
		for _, rs := range rcv.seen {
			for _, r := range rs {
				seen[r]++
			}
		}
		for _, tok := range tokens {
			if seen[tok] != 1 {
				t.Fatalf("recipient %s reached %d times", tok, seen[tok])
			}
		}
	})
}

// A dropped connection and a 503 within one attempt are retried at once by
// the relay's client (idemhttp.Transport) with the same key: the message
// is delivered on the job's first attempt, once.
func TestRelayRetriesWithinAnAttempt(t *testing.T) {
	forEachDriver(t, func(t *testing.T, url string) {
		ctx := context.Background()
		rcv := newReceiver(t)
		rcv.fail = func(key string, call int) int {
			switch call {
			case 1:
				return dropConnection
			case 2:
				return http.StatusServiceUnavailable
			}
			return 0
		}
		cfg := fastConfig()
		cfg.Lease = 10 * time.Second // no lease lost while the client retries, on a loaded machine too
		ob, err := outbox.New(openLedger(t, url), cfg)
		if err != nil {
			t.Fatal(err)
		}
		id := add(t, ob, outbox.Message{ID: "receipt-1", URL: rcv.URL, Body: []byte(`{"total":12}`)})
		if err := ob.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer ob.Stop(ctx)
		var st []outbox.Delivery
		waitFor(t, 30*time.Second, "the message delivered", func() bool {
			st, _ = ob.Status(ctx, id)
			return len(st) == 1 && st[0].State == idemtype.JobCompleted
		})
		calls, effects := rcv.snapshot()
		if calls["receipt-1"] != 3 || effects["receipt-1"] != 1 || st[0].Attempts != 1 {
			t.Errorf("%d sends, %d effects, %d job attempts; want 3, 1, 1", calls["receipt-1"], effects["receipt-1"], st[0].Attempts)
		}
	})
}

// A receiver's 4xx answer is a dead letter (kept, inspectable,
// requeueable); Add refuses bad messages and a reused ID with other
// content, and a retried Add of the same message is a no-op.
func TestOutboxInputAndDeadLetters(t *testing.T) {
	forEachDriver(t, func(t *testing.T, url string) {
		ctx := context.Background()
		rcv := newReceiver(t)
		rcv.fail = func(key string, call int) int {
			if key == "bad" && call == 1 {
				return http.StatusUnprocessableEntity
			}
			return 0
		}
		ob := newOutbox(t, openLedger(t, url))
		add(t, ob, outbox.Message{ID: "bad", URL: rcv.URL, Body: []byte(`{}`)})
		add(t, ob, outbox.Message{ID: "bad", URL: rcv.URL, Body: []byte(`{}`)}) // a retried business transaction

		tx, _ := ob.DB().BeginTx(ctx, nil)
		if _, err := ob.Add(ctx, tx, outbox.Message{ID: "bad", URL: rcv.URL, Body: []byte(`{"other":1}`)}); !errors.Is(err, idem.ErrMismatch) {
			t.Errorf("same ID, other body: %v, want ErrMismatch", err)
		}
		for name, m := range map[string]outbox.Message{
			"relative url":        {URL: "/hook"},
			"ftp url":             {URL: "ftp://example.com/x"},
			"slash in id":         {ID: "a/b", URL: rcv.URL},
			"non-json fan-out":    {URL: rcv.URL, Body: []byte("hi"), Recipients: []string{"a"}},
			"chunk size too big":  {URL: rcv.URL, Body: []byte("{}"), Recipients: []string{"a"}, ChunkSize: 10001},
			"chunk without fan":   {URL: rcv.URL, ChunkSize: 5},
			"control char in id":  {ID: "a\x00", URL: rcv.URL},
			"oversized body":      {URL: rcv.URL, Body: make([]byte, 2<<20)},
			"method with a space": {URL: rcv.URL, Method: "PO ST"},
		} {
			if _, err := ob.Add(ctx, tx, m); !errors.Is(err, idem.ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", name, err)
			}
		}
		if _, err := ob.Add(ctx, nil, outbox.Message{URL: rcv.URL}); !errors.Is(err, idem.ErrInvalid) {
			t.Errorf("nil tx: %v", err)
		}
		tx.Rollback()

		if err := ob.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer ob.Stop(ctx)
		var st []outbox.Delivery
		waitFor(t, 30*time.Second, "dead letter", func() bool {
			st, _ = ob.Status(ctx, "bad")
			return len(st) == 1 && st[0].State == idemtype.JobDead
		})
		if st[0].Attempts != 1 || !strings.Contains(st[0].LastError, "HTTP 422") {
			t.Fatalf("dead delivery: %+v", st[0])
		}
		if _, err := ob.Jobs().Requeue(ctx, st[0].JobID); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "requeued delivery", func() bool {
			st, _ = ob.Status(ctx, "bad")
			return st[0].State == idemtype.JobCompleted
		})
		if calls, effects := rcv.snapshot(); calls["bad"] != 2 || effects["bad"] != 1 {
			t.Fatalf("receiver: %d calls, %d effects; want 2 and 1", calls["bad"], effects["bad"])
		}
	})
}
