package jetstream_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	idemjs "github.com/idemdev/idem/broker/jetstream"
	"github.com/idemdev/idem/internal/ledgertest"
)

// BenchmarkConsume compares, on one stream and database, messages
// consumed exactly once through the Consumer (inbox record and effect in
// one transaction, then the ack) with JetStream's plain at-least-once loop
// (the effect inserted on its own, then the ack), and that loop with no
// effect at all (ack-only: the broker's ceiling). Reports msgs/s.
func BenchmarkConsume(b *testing.B) {
	for _, driver := range ledgertest.Drivers {
		for _, mode := range []string{"ack-only", "plain", "idem"} {
			b.Run(driver+"/"+mode, func(b *testing.B) {
				e := setup(b, driver)
				ctx := context.Background()
				for i := range b.N {
					e.publish(b, e.stream+".bench", fmt.Sprintf("m%d", i), fmt.Sprintf(`{"n":%d}`, i))
				}
				cons, err := e.js.CreateOrUpdateConsumer(ctx, e.stream, js.ConsumerConfig{Durable: "bench", AckPolicy: js.AckExplicitPolicy})
				if err != nil {
					b.Fatal(err)
				}
				db := e.l.Driver().DB()
				b.ResetTimer()
				start := time.Now()
				switch mode {
				case "ack-only", "plain":
					for n := 0; n < b.N; {
						batch, err := cons.Fetch(100, js.FetchMaxWait(time.Second))
						if err != nil {
							b.Fatal(err)
						}
						for m := range batch.Messages() {
							id, _ := idemjs.ID(m)
							if mode == "ack-only" {
							} else if _, err := db.ExecContext(ctx, e.rebind(`INSERT INTO effects (id, body) VALUES (?, ?)`), id, string(m.Data())); err != nil {
								b.Fatal(err)
							}
							if err := m.Ack(); err != nil {
								b.Fatal(err)
							}
							n++
						}
					}
				case "idem":
					c, err := idemjs.NewConsumer(e.in, e.js, cons, e.effect, nil)
					if err != nil {
						b.Fatal(err)
					}
					for n := 0; n < b.N; {
						batch, err := cons.Fetch(100, js.FetchMaxWait(time.Second))
						if err != nil {
							b.Fatal(err)
						}
						for m := range batch.Messages() {
							if err := c.Handle(ctx, m); err != nil {
								b.Fatal(err)
							}
							n++
						}
					}
				}
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
			})
		}
	}
}
