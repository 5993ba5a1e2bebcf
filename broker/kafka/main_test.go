package kafka_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/broker/kafka"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/internal/crashpoint"
	"github.com/idemdev/idem/internal/pgtest"
	"github.com/idemdev/idem/outbox"
)

// childEnv, set, makes the test binary a consumer process (see child).
const childEnv = "IDEM_KAFKA_TEST_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		os.Exit(child(spec))
	}
	pgtest.Main(m)
}

// childSpec is what a consumer process is told.
type childSpec struct {
	DB, Group, Topic string
	Seeds            []string
	MaxBatch         int
	// Relay, when set, makes the child an outbox relay publishing to
	// Topic instead of a consumer.
	Relay bool
	// ByID names records by the publisher's IDHeader.
	ByID bool
}

// child consumes until SIGTERM (then prints its Stats as JSON and exits 0)
// or until an armed crash point kills it.
func child(spec string) int {
	var s childSpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	l, err := dburl.Open(ctx, s.DB, &idem.Options{Logger: quiet()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer l.Close()
	if s.Relay {
		ob := newOutbox(l, s)
		if err := ob.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		<-ctx.Done()
		ob.Stop(context.Background())
		return 0
	}
	cfg := &kafka.Config{
		Seeds: s.Seeds, Group: s.Group, Topics: []string{s.Topic}, MaxBatch: s.MaxBatch,
		Logger: quiet(), Options: fastGroup(),
	}
	if s.ByID {
		cfg.ID = kafka.HeaderID(kafka.IDHeader)
	}
	c, err := kafka.NewConsumer(l, cfg, effect(l))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := c.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	json.NewEncoder(os.Stdout).Encode(c.Stats())
	return 0
}

// newOutbox makes an outbox relaying to s.Topic through a kafka.Publisher.
func newOutbox(l *idem.Ledger, s childSpec) *outbox.Outbox {
	pub, err := kafka.NewPublisher(&kafka.PublisherConfig{Seeds: s.Seeds, Topic: s.Topic})
	if err != nil {
		panic(err)
	}
	ob, err := outbox.New(l, &outbox.Config{
		Publisher: pub, Workers: 4, Lease: time.Second, PollInterval: 20 * time.Millisecond, Logger: quiet(),
		Backoff: func(int) time.Duration { return 10 * time.Millisecond },
	})
	if err != nil {
		panic(err)
	}
	return ob
}

// fastGroup notices a dead member within a couple of seconds.
func fastGroup() []kgo.Opt {
	var log []kgo.Opt
	if os.Getenv("IDEM_TEST_LOG") != "" {
		log = append(log, kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, nil)))
	}
	return append(log,
		kgo.SessionTimeout(3*time.Second), kgo.HeartbeatInterval(300*time.Millisecond),
		kgo.RebalanceTimeout(5*time.Second), kgo.FetchMaxWait(200*time.Millisecond),
	)
}

func quiet() *slog.Logger {
	if os.Getenv("IDEM_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// effect is the handler under attack: one row per application, with no
// uniqueness, so that a second application would show as a second row.
func effect(l *idem.Ledger) kafka.Handler {
	q := `INSERT INTO kafka_effects (msg) VALUES ($1)`
	if l.Driver().Name() == "sqlite" {
		q = `INSERT INTO kafka_effects (msg) VALUES (?)`
	}
	return func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		_, err := tx.ExecContext(ctx, q, string(r.Value))
		return err
	}
}

// forEachDriver runs fn as a subtest per database, named after it.
func forEachDriver(t *testing.T, fn func(t *testing.T, url string)) {
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			url := "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
			if driver == "postgres" {
				url = pgtest.NewDB(t)
			}
			fn(t, url)
		})
	}
}

// openLedger opens the database and creates the effects table.
func openLedger(t testing.TB, url string) *idem.Ledger {
	t.Helper()
	l, err := dburl.Open(context.Background(), url, &idem.Options{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if _, err := l.DB().Exec(`CREATE TABLE IF NOT EXISTS kafka_effects (msg TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return l
}

// newCluster starts an in-process Kafka (kfake) on loopback with topic
// "t" of partitions partitions, and produces n records "m0".."m<n-1>".
func newCluster(t testing.TB, partitions int32, n int) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, "t"),
		kfake.GroupMinSessionTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	produce(t, c.ListenAddrs(), 0, n)
	return c
}

// produce writes records m<from>..m<to-1> to topic "t", keyed by value.
func produce(t testing.TB, seeds []string, from, to int) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var rs []*kgo.Record
	for i := from; i < to; i++ {
		v := fmt.Sprintf("m%d", i)
		rs = append(rs, &kgo.Record{Topic: "t", Key: []byte(v), Value: []byte(v)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// consumerProc is a consumer child process.
type consumerProc struct {
	cmd *exec.Cmd
	out strings.Builder
	err strings.Builder
}

// start runs a consumer child with the crash point spec armed (none if "").
func start(t *testing.T, s childSpec, crash string) *consumerProc {
	t.Helper()
	b, _ := json.Marshal(s)
	p := &consumerProc{cmd: exec.Command(os.Args[0], "-test.run=^$")}
	p.cmd.Env = append(os.Environ(), childEnv+"="+string(b), crashpoint.EnvVar+"="+crash)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.err
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			p.cmd.Process.Kill()
			p.cmd.Wait()
		}
	})
	return p
}

// waitKilled waits for the child to die by SIGKILL at its crash point.
func (p *consumerProc) waitKilled(t *testing.T) {
	t.Helper()
	timer := time.AfterFunc(time.Minute, func() { p.cmd.Process.Signal(syscall.SIGQUIT) })
	defer timer.Stop()
	err := p.cmd.Wait()
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("consumer ended with %v, want killed at its crash point; stderr:\n%s", err, p.err.String())
	}
}

// stop ends the child with SIGTERM and returns its Stats.
func (p *consumerProc) stop(t *testing.T) kafka.Stats {
	t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	timer := time.AfterFunc(time.Minute, func() { p.cmd.Process.Signal(syscall.SIGQUIT) })
	defer timer.Stop()
	if err := p.cmd.Wait(); err != nil {
		t.Fatalf("consumer: %v; stderr:\n%s", err, p.err.String())
	}
	var st kafka.Stats
	if err := json.Unmarshal([]byte(p.out.String()), &st); err != nil {
		t.Fatalf("consumer stats %q: %v", p.out.String(), err)
	}
	return st
}

// effects counts the rows of each message.
func effects(t testing.TB, l *idem.Ledger) map[string]int {
	t.Helper()
	rows, err := l.DB().Query(`SELECT msg, count(*) FROM kafka_effects GROUP BY msg`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var m string
		var n int
		if err := rows.Scan(&m, &n); err != nil {
			t.Fatal(err)
		}
		out[m] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// waitAll waits until n distinct messages have an effect, bounded.
func waitAll(t *testing.T, l *idem.Ledger, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for len(effects(t, l)) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d messages applied within a minute", len(effects(t, l)), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkOnce fails unless each of m0..m<n-1> had exactly one effect.
func checkOnce(t *testing.T, l *idem.Ledger, n int) {
	t.Helper()
	got := effects(t, l)
	lost, dup := 0, 0
	for i := range n {
		switch c := got[fmt.Sprintf("m%d", i)]; {
		case c == 0:
			lost++
		case c > 1:
			dup += c - 1
		}
	}
	if lost != 0 || dup != 0 || len(got) != n {
		t.Fatalf("%d messages: %d lost, %d duplicate effects, %d distinct applied", n, lost, dup, len(got))
	}
}
