package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/outbox"
)

// fakePublisher records publications; it fails the first attempt of each
// key, and refuses "poison" for good.
type fakePublisher struct {
	mu   sync.Mutex
	got  map[string][]outbox.Publication
	seen map[string]bool
}

func (p *fakePublisher) Publish(_ context.Context, m outbox.Publication) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if m.URL == "poison" {
		return idem.Permanent(errors.New("refused"))
	}
	if !p.seen[m.Key] {
		p.seen[m.Key] = true
		return errors.New("broker unavailable")
	}
	p.got[m.Key] = append(p.got[m.Key], m)
	return nil
}

// With a Publisher, deliveries go to it instead of over HTTP: the URL is
// free-form (or empty), a failed publish is retried with the same key, and
// a permanent error dead-letters the delivery.
func TestPublisher(t *testing.T) {
	forEachDriver(t, func(t *testing.T, url string) {
		l := openLedger(t, url)
		pub := &fakePublisher{got: map[string][]outbox.Publication{}, seen: map[string]bool{}}
		cfg := fastConfig()
		cfg.Publisher = pub
		cfg.MaxAttempts = 3
		ob, err := outbox.New(l, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			add(t, ob, outbox.Message{ID: fmt.Sprintf("m%d", i), Body: []byte("x")})
		}
		add(t, ob, outbox.Message{ID: "topic", URL: "orders", Body: []byte("y")})
		add(t, ob, outbox.Message{ID: "bad", URL: "poison", Body: []byte("z")})
		if err := ob.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		defer ob.Stop(context.Background())
		waitFor(t, 30*time.Second, "every delivery settled", func() bool {
			n, err := ob.Jobs().Counts(context.Background(), outbox.DefaultQueue)
			return err == nil && n[idemtype.JobCompleted] == 4 && n[idemtype.JobDead] == 1
		})
		pub.mu.Lock()
		defer pub.mu.Unlock()
		for _, k := range []string{"m0", "m1", "m2", "topic"} {
			if len(pub.got[k]) != 1 || pub.got[k][0].Key != k {
				t.Fatalf("publications of %s: %+v", k, pub.got[k])
			}
		}
		if pub.got["topic"][0].URL != "orders" || string(pub.got["topic"][0].Body) != "y" {
			t.Fatalf("publication %+v", pub.got["topic"][0])
		}
	})
}
