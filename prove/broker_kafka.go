package prove

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemdev/idem/broker/kafka"
	"github.com/idemdev/idem/internal/crashpoint"
)

// The Kafka variant of broker-redelivery. Kafka here is kfake, franz-go's
// in-process cluster, listening on loopback in the prover's process: no
// Kafka broker can be installed where the prover runs.
//
// Every operation is a record (key and value: the operation's key) in a
// topic of three partitions. In the attack, Workers consumer processes of
// one group (broker/kafka.Consumer, offsets stored with the effects)
// consume them, each armed to die at a random transaction, before or after
// its commit; a dead consumer is replaced (armed again, up to twice the
// number of workers, then unarmed), so the group rebalances again and
// again. Then a replay: a consumer of a new group, recording under the
// first group's inbox source, reads the whole topic again from its start,
// as after an offset reset: every record must be a duplicate. Each
// operation must have exactly one effect.

// roleKafka consumes with broker/kafka.Consumer (spec.Kafka).
const roleKafka = "kafka"

// kafkaSpec is what a Kafka consumer worker is told.
type kafkaSpec struct {
	Seeds  []string `json:"seeds"`
	Topic  string   `json:"topic"`
	Group  string   `json:"group"`
	Source string   `json:"source"`
	// Expect, when positive, makes the worker exit once it has committed
	// that many records; otherwise it runs until stdin ends.
	Expect int `json:"expect,omitempty"`
}

const kafkaPartitions = 3

func runBrokerKafka(ctx context.Context, t *trial) error {
	t.noLedger = true
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(kafkaPartitions, "prove"),
		kfake.GroupMinSessionTimeout(500*time.Millisecond))
	if err != nil {
		return fmt.Errorf("kfake: %w", err)
	}
	defer c.Close()
	seeds := c.ListenAddrs()
	if err := kafkaProduce(ctx, seeds, t.shuffled()); err != nil {
		return err
	}
	ks := kafkaSpec{Seeds: seeds, Topic: "prove", Group: "prove-" + t.r.runID}
	ks.Source = "kafka/" + ks.Group
	s := spec{Role: roleKafka, Kafka: &ks}

	var workers []*proc
	kills, maxKills := 0, 2*t.r.cfg.Workers
	startOne := func() error {
		crash := ""
		if kills < maxKills {
			points := []string{crashpoint.BeforeCommit, crashpoint.AfterCommit}
			crash = fmt.Sprintf("%s:%d", points[t.intN(len(points))], 1+t.intN(8))
		}
		p, err := t.start(ctx, s, crash)
		if err != nil {
			return err
		}
		workers = append(workers, p)
		return nil
	}
	for range t.r.cfg.Workers {
		if err := startOne(); err != nil {
			return err
		}
	}
	for {
		live := workers[:0]
		for _, p := range workers {
			select {
			case <-p.done:
				if err := p.wait(ctx, true); err != nil {
					return err
				}
				kills++
			default:
				live = append(live, p)
			}
		}
		workers = live
		for len(workers) < t.r.cfg.Workers {
			if err := startOne(); err != nil {
				return err
			}
		}
		effects, err := t.effects(ctx)
		if err != nil {
			return err
		}
		if len(effects) >= len(t.keys) {
			break
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	var errs []error
	for _, p := range workers {
		p.stdin.Close()
	}
	for _, p := range workers {
		errs = append(errs, p.wait(ctx, true))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	t.note("%d consumers killed before or after a commit", kills)

	replay := ks
	replay.Group += "-replay"
	replay.Expect = len(t.keys)
	p, err := t.start(ctx, spec{Role: roleKafka, Kafka: &replay}, "")
	if err != nil {
		return err
	}
	return p.wait(ctx, false)
}

// kafkaProduce writes one record per key, with the key as key and value.
func kafkaProduce(ctx context.Context, seeds, keys []string) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		return err
	}
	defer cl.Close()
	rs := make([]*kgo.Record, len(keys))
	for i, k := range keys {
		rs[i] = &kgo.Record{Topic: "prove", Key: []byte(k), Value: []byte(k)}
	}
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		return fmt.Errorf("produce to kfake: %w", err)
	}
	return nil
}

// runKafka consumes s.Kafka's topic with broker/kafka.Consumer, writing
// each record's effect in the consumer's transaction and reporting every
// record once its transaction committed. With NoGuard every delivery gets
// a fresh inbox id, so nothing is deduplicated.
func (w *worker) runKafka(ctx context.Context) error {
	ks := w.s.Kafka
	if ks == nil {
		return errors.New("kafka worker without its kafka spec")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	gs := map[*kgo.Record]int{}
	g, committed := 0, 0
	cfg := &kafka.Config{
		Seeds: ks.Seeds, Group: ks.Group, Topics: []string{ks.Topic}, Source: ks.Source, MaxBatch: 3,
		Logger: slog.New(slog.NewTextHandler(w.stderr, &slog.HandlerOptions{Level: slog.LevelError})),
		Options: []kgo.Opt{
			kgo.SessionTimeout(3 * time.Second), kgo.HeartbeatInterval(300 * time.Millisecond),
			kgo.RebalanceTimeout(5 * time.Second), kgo.FetchMaxWait(200 * time.Millisecond),
		},
		OnCommit: func(cs []kafka.Committed) {
			mu.Lock()
			defer mu.Unlock()
			for _, c := range cs {
				key := string(c.Record.Key)
				n, ok := gs[c.Record]
				if !ok {
					g++
					n = g
					w.out.emit(wireEvent{Ev: evInvoke, G: n, Key: key})
				}
				delete(gs, c.Record)
				w.out.emit(wireEvent{Ev: evOK, G: n, Key: key, Body: key, Replay: c.Duplicate})
			}
			committed += len(cs)
			if ks.Expect > 0 && committed >= ks.Expect {
				cancel()
			}
		},
	}
	if w.s.NoGuard {
		cfg.ID = func(*kgo.Record) (string, error) {
			var b [16]byte
			rand.Read(b[:])
			return hex.EncodeToString(b[:]), nil
		}
	}
	c, err := kafka.NewConsumer(w.l, cfg, func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		key := string(r.Key)
		mu.Lock()
		g++
		gs[r] = g
		w.out.emit(wireEvent{Ev: evInvoke, G: g, Key: key})
		mu.Unlock()
		return insertEffect(ctx, tx, w.rebind, w.s.Scope, key, key)
	})
	if err != nil {
		return err
	}
	if ks.Expect == 0 {
		go func() {
			io.Copy(io.Discard, w.in)
			cancel()
		}()
	}
	return c.Run(ctx)
}
