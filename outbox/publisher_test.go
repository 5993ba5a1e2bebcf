package outbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/jobs"
	"github.com/idemdev/idem/outbox"
)

// recorder is a Publisher that fails each key's first fails attempts, and
// refuses for good the keys in permanent.
type recorder struct {
	mu        sync.Mutex
	fails     int
	tries     map[string]int
	sent      []outbox.Envelope
	permanent map[string]bool
}

func (r *recorder) Publish(ctx context.Context, e outbox.Envelope) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tries[e.Key]++
	switch {
	case r.permanent[e.Key]:
		return jobs.Permanent(errors.New("refused"))
	case r.tries[e.Key] <= r.fails:
		return errors.New("broker unavailable")
	}
	r.sent = append(r.sent, e)
	return nil
}

func (r *recorder) sentCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sent)
}

// With a Publisher the relay publishes instead of requesting: the key is
// the message id, URL the destination; errors retry, permanent ones
// dead-letter.
func TestPublisher(t *testing.T) {
	forEachDriver(t, func(t *testing.T, url string) {
		l := openLedger(t, url)
		pub := &recorder{fails: 2, tries: map[string]int{}, permanent: map[string]bool{"bad": true}}
		cfg := fastConfig()
		cfg.Publisher = pub
		ob, err := outbox.New(l, cfg)
		if err != nil {
			t.Fatal(err)
		}
		add(t, ob, outbox.Message{ID: "m1", URL: "orders.created", Body: []byte(`{"n":1}`)})
		add(t, ob, outbox.Message{ID: "m2", Body: []byte(`{"n":2}`)}) // no URL: the publisher's default
		add(t, ob, outbox.Message{ID: "bad", Body: []byte(`{}`)})
		ctx := context.Background()
		if err := ob.Start(ctx); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 30*time.Second, "two deliveries published", func() bool { return pub.sentCount() == 2 })
		waitFor(t, 30*time.Second, "bad dead-lettered", func() bool {
			ds, err := ob.Status(ctx, "bad")
			return err == nil && len(ds) == 1 && ds[0].State == idemtype.JobDead
		})
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := ob.Stop(sctx); err != nil {
			t.Fatal(err)
		}
		got := map[string]outbox.Envelope{}
		for _, e := range pub.sent {
			got[e.Key] = e
		}
		if got["m1"].To != "orders.created" || string(got["m1"].Body) != `{"n":1}` || got["m2"].To != "" {
			t.Fatalf("published %+v", pub.sent)
		}
		// At least: a lease that ran out under load may add a try.
		if pub.tries["m1"] < 3 || pub.tries["bad"] < 1 {
			t.Fatalf("tries %v: want 3 for m1 (two failures), 1 for bad", pub.tries)
		}
	})
}

// With a Publisher the URL is a destination name, not an HTTP URL; it
// still may not hold control characters.
func TestPublisherURLIsADestination(t *testing.T) {
	l := openLedger(t, "sqlite:"+t.TempDir()+"/idem.db")
	cfg := fastConfig()
	cfg.Publisher = &recorder{tries: map[string]int{}}
	ob, err := outbox.New(l, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tx, err := ob.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := ob.Add(ctx, tx, outbox.Message{URL: "orders\n", Body: []byte(`{}`)}); err == nil {
		t.Fatal("a destination with a newline was accepted")
	}
	if _, err := ob.Add(ctx, tx, outbox.Message{URL: "orders.created", Body: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
}
