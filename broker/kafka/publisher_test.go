package kafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/idemdev/idem/internal/crashpoint"
	"github.com/idemdev/idem/outbox"
)

// A relay killed after Kafka accepted a record, before the outbox
// recorded the delivery, publishes it again: the record is in the log
// twice with one id, and a consumer naming records by that id applies it
// once. Nothing is lost.
func TestPublisherRelayCrash(t *testing.T) {
	forEachDriver(t, func(t *testing.T, url string) {
		const n = 40
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "t"),
			kfake.GroupMinSessionTimeout(500*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		l := openLedger(t, url)
		s := childSpec{DB: url, Group: "g", Topic: "t", Seeds: c.ListenAddrs(), MaxBatch: 10, ByID: true}
		ob := newOutbox(l, s)
		ctx := context.Background()
		tx, err := ob.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if _, err := ob.Add(ctx, tx, outbox.Message{ID: fmt.Sprintf("id%d", i), Body: fmt.Appendf(nil, "m%d", i)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		rs := s
		rs.Relay = true
		start(t, rs, crashpoint.AfterDelivery+":5").waitKilled(t)
		if err := ob.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ob.Stop(context.Background()) })
		p := start(t, s, "")
		waitAll(t, l, n)
		// Let the consumer read every record in the log, the repeats too.
		deadline := time.Now().Add(time.Minute)
		for endOffsets(t, l) < n+1 {
			if time.Now().After(deadline) {
				t.Fatalf("consumed %d records, want at least %d (a repeat)", endOffsets(t, l), n+1)
			}
			time.Sleep(50 * time.Millisecond)
		}
		st := p.stop(t)
		checkOnce(t, l, n)
		if st.Duplicates == 0 || st.Processed != n {
			t.Fatalf("consumer %+v: want %d processed and the republished records as duplicates", st, n)
		}
	})
}
