package kafka_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/broker/kafka"
	"github.com/idemdev/idem/internal/ledgertest"
)

// BenchmarkConsume measures records/s consumed from kfake (franz-go's
// in-process Kafka, not a real broker) with the same effect, one row per
// record in one transaction per polled batch: through the adapter (inbox
// row and stored offset in the transaction: exactly once) and through a
// plain franz-go at-least-once loop (commit to Kafka after the
// transaction). Compare the two in one run; kfake's own speed bounds both.
func BenchmarkConsume(b *testing.B) {
	for _, driver := range ledgertest.Drivers {
		b.Run("idem/"+driver, func(b *testing.B) { benchConsume(b, driver, false) })
		b.Run("plain/"+driver, func(b *testing.B) { benchConsume(b, driver, true) })
	}
}

func benchConsume(b *testing.B, driver string, plain bool) {
	l := ledgertest.Open(b, driver)
	if _, err := l.DB().Exec(`CREATE TABLE kafka_effects (msg TEXT NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "t"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	produce(b, c.ListenAddrs(), 0, b.N)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	b.ResetTimer()
	if plain {
		plainLoop(ctx, b, l, c.ListenAddrs())
	} else {
		var done int
		cctx, stop := context.WithCancel(ctx)
		cons, err := kafka.NewConsumer(l, &kafka.Config{
			Seeds: c.ListenAddrs(), Group: "g", Topics: []string{"t"}, Logger: quiet(),
			OnCommit: func(cs []kafka.Committed) {
				if done += len(cs); done >= b.N {
					stop()
				}
			},
		}, effect(l))
		if err != nil {
			b.Fatal(err)
		}
		if err := cons.Run(cctx); err != nil {
			b.Fatal(err)
		}
		if done < b.N {
			b.Fatalf("consumed %d of %d", done, b.N)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

// plainLoop is the usual at-least-once loop: poll, apply the batch's
// effects in one transaction, commit, then commit the offsets to Kafka.
func plainLoop(ctx context.Context, b *testing.B, l *idem.Ledger, seeds []string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	h := effect(l)
	for done := 0; done < b.N; {
		fs := cl.PollRecords(ctx, 0)
		if err := fs.Err0(); err != nil {
			b.Fatal(err)
		}
		var tx *sql.Tx
		var end func()
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if len(p.Records) == 0 {
				return
			}
			tx, end, err = l.Driver().Begin(ctx)
			if err != nil {
				b.Fatal(err)
			}
			for _, r := range p.Records {
				if err := h(ctx, tx, r); err != nil {
					b.Fatal(err)
				}
			}
			if err := tx.Commit(); err != nil {
				b.Fatal(err)
			}
			end()
			done += len(p.Records)
		})
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
