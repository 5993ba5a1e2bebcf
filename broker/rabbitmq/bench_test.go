package rabbitmq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemdev/idem/internal/ledgertest"
)

// BenchmarkConsume compares, on one queue and database, messages consumed
// exactly once through the Consumer (inbox record and effect in one
// transaction, then the ack) with a plain at-least-once loop on the same
// channel settings (the effect inserted on its own, then the ack), and that
// loop with no effect at all (ack-only: the broker's ceiling). Reports
// msgs/s.
func BenchmarkConsume(b *testing.B) {
	for _, driver := range ledgertest.Drivers {
		for _, mode := range []string{"ack-only", "plain", "idem"} {
			b.Run(driver+"/"+mode, func(b *testing.B) {
				e := setup(b, driver)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				for i := range b.N {
					e.publish(b, fmt.Sprintf("m%d", i), fmt.Sprintf(`{"n":%d}`, i))
				}
				db := e.l.Driver().DB()
				c := e.consumer(b, nil, nil)
				conn, err := e.dial()
				if err != nil {
					b.Fatal(err)
				}
				defer conn.Close()
				ch, err := conn.Channel()
				if err != nil {
					b.Fatal(err)
				}
				if err := ch.Qos(100, 0, false); err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				start := time.Now()
				ds, err := ch.ConsumeWithContext(ctx, e.queue, "", false, false, false, false, nil)
				if err != nil {
					b.Fatal(err)
				}
				for n := 0; n < b.N; n++ {
					d := <-ds
					switch mode {
					case "idem":
						if err := c.Handle(ctx, d); err != nil {
							b.Fatal(err)
						}
						continue
					case "plain":
						if _, err := db.ExecContext(ctx, e.rebind(`INSERT INTO effects (id, body) VALUES (?, ?)`), d.MessageId, string(d.Body)); err != nil {
							b.Fatal(err)
						}
					}
					if err := d.Ack(false); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
			})
		}
	}
}
