package kafka_test

import (
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/broker/kafka"
	"github.com/idemdev/idem/internal/crashpoint"
)

const (
	partitions = 3
	messages   = 300
)

// A consumer killed with its effects written but not committed leaves
// nothing behind: the next consumer starts from the last committed offset
// and applies each message exactly once.
func TestCrashBeforeCommit(t *testing.T) {
	forEachDriver(t, func(t *testing.T, url string) {
		c := newCluster(t, partitions, messages)
		l := openLedger(t, url)
		s := childSpec{DB: url, Group: "g", Topic: "t", Seeds: c.ListenAddrs(), MaxBatch: 7}
		start(t, s, crashpoint.BeforeCommit+":4").waitKilled(t)
		if n := len(effects(t, l)); n != 3*7 {
			t.Fatalf("%d messages applied before the crash, want the 3 committed batches of 7", n)
		}
		p := start(t, s, "")
		waitAll(t, l, messages)
		st := p.stop(t)
		checkOnce(t, l, messages)
		if st.Processed != messages-3*7 || st.Duplicates != 0 {
			t.Fatalf("restarted consumer %+v, want %d processed and no duplicates: it must resume at the stored offsets", st, messages-3*7)
		}
	})
}

// A consumer killed right after a commit never had Kafka told anything:
// the next one resumes at the offsets stored with the effects, past the
// committed batch, so nothing is even redelivered.
func TestCrashAfterCommitResumes(t *testing.T) {
	forEachDriver(t, func(t *testing.T, url string) {
		c := newCluster(t, partitions, messages)
		l := openLedger(t, url)
		s := childSpec{DB: url, Group: "g", Topic: "t", Seeds: c.ListenAddrs(), MaxBatch: 5}
		start(t, s, crashpoint.AfterCommit+":3").waitKilled(t)
		if n := len(effects(t, l)); n != 3*5 {
			t.Fatalf("%d messages applied before the crash, want 3 batches of 5", n)
		}
		p := start(t, s, "")
		waitAll(t, l, messages)
		st := p.stop(t)
		checkOnce(t, l, messages)
		if st.Processed != messages-3*5 || st.Duplicates != 0 {
			t.Fatalf("restarted consumer %+v, want %d processed and no duplicates", st, messages-3*5)
		}
	})
}

// Records redelivered from before the stored offsets (here: the offsets
// row is lost, so the group starts over from the log's start) are
// recognised by the inbox and have no second effect.
func TestRedeliveryIsNoOp(t *testing.T) {
	forEachDriver(t, func(t *testing.T, url string) {
		c := newCluster(t, partitions, messages)
		l := openLedger(t, url)
		s := childSpec{DB: url, Group: "g", Topic: "t", Seeds: c.ListenAddrs(), MaxBatch: 50}
		p := start(t, s, "")
		waitAll(t, l, messages)
		p.stop(t)
		if _, err := l.DB().Exec(`DELETE FROM idem_kafka_offsets`); err != nil {
			t.Fatal(err)
		}
		p = start(t, s, "")
		deadline := time.Now().Add(time.Minute)
		var st kafka.Stats
		for {
			// The replay is done when the offsets are back at the end.
			var n int
			if err := l.DB().QueryRow(`SELECT count(*) FROM idem_kafka_offsets`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n == partitions && endOffsets(t, l) == messages {
				st = p.stop(t)
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("replay not done within a minute")
			}
			time.Sleep(50 * time.Millisecond)
		}
		checkOnce(t, l, messages)
		if st.Processed != 0 || st.Duplicates != messages {
			t.Fatalf("replaying consumer %+v, want every record a duplicate", st)
		}
	})
}

// endOffsets sums the stored next offsets: the records consumed.
func endOffsets(t *testing.T, l *idem.Ledger) int64 {
	t.Helper()
	var n int64
	if err := l.DB().QueryRow(`SELECT coalesce(sum(next_offset), 0) FROM idem_kafka_offsets`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Two consumers share the group: the second joins while the first is
// consuming (a rebalance moves partitions to it), then the first is
// killed mid-run and the group gives its partitions to the second, which
// resumes them from the stored offsets. A third joins late, after more
// records arrive. Every message has exactly one effect.
func TestGroupRebalance(t *testing.T) {
	forEachDriver(t, func(t *testing.T, url string) {
		const n = 600 // 200 a partition: 67 batches of 3
		c := newCluster(t, partitions, n)
		l := openLedger(t, url)
		s := childSpec{DB: url, Group: "g", Topic: "t", Seeds: c.ListenAddrs(), MaxBatch: 3}
		// a keeps at least one partition (the balancer is sticky) until it
		// dies, so it reaches its 40th commit.
		a := start(t, s, crashpoint.AfterCommit+":40")
		waitAll(t, l, 1)
		b := start(t, s, "")
		a.waitKilled(t)
		produce(t, c.ListenAddrs(), n, 2*n)
		d := start(t, s, "")
		waitAll(t, l, 2*n)
		sb, sd := b.stop(t), d.stop(t)
		checkOnce(t, l, 2*n)
		if sb.Processed == 0 {
			t.Fatalf("the surviving consumer processed nothing (%+v, late one %+v)", sb, sd)
		}
	})
}
