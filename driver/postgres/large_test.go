package postgres

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/internal/groupcommit"
)

// TestGroupCommitLargeFinish: completions with large bodies (sent alone by
// a committer, their bytes bound as they are) mixed with small ones in the
// same batches store every body and meta byte for byte; a large
// completion with a stale fence is fenced, and a large body with no meta
// stores NULL meta.
func TestGroupCommitLargeFinish(t *testing.T) {
	t.Parallel()
	d := openTest(t)
	var large atomic.Int64 // large writes the committers were given
	d.gc.Close()
	commits := make([]func([]*groupcommit.Write), len(d.committers))
	for i, c := range d.committers {
		commits[i] = func(batch []*groupcommit.Write) {
			for _, w := range batch {
				if isLarge(w) {
					large.Add(1)
				}
			}
			c.commit(batch)
		}
	}
	d.gc = groupcommit.NewWriterBounded(d.ex, DefaultMaxBatch, maxBatchBytes, batchWait, commits...)

	ctx := t.Context()
	const n = 48
	type want struct {
		fence      driver.Fence
		meta, body []byte
	}
	wants := make([]want, n)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range n {
		key := fmt.Sprintf("k%d", i)
		rec, created, err := d.Claim(ctx, driver.Shared, driver.ClaimParams{Scope: "large", Key: key, Fingerprint: "fp",
			LeaseID: int64(i + 1), Lease: time.Hour, Retention: time.Hour, TombstoneTTL: time.Hour})
		if err != nil || !created {
			t.Fatalf("claim %s: created=%v err=%v", key, created, err)
		}
		size := 100 // every third is small: batched with the large ones' neighbours
		if i%3 != 0 {
			size = largeWrite + rng.IntN(256<<10)
		}
		body := make([]byte, size)
		for j := range body {
			body[j] = byte(rng.Uint32()) // zeros and invalid UTF-8 included
		}
		var meta []byte
		if i%2 == 0 {
			meta = []byte(`{"content-type":["application/octet-stream"]}`)
		}
		wants[i] = want{driver.Fence{Scope: "large", Key: key, Attempt: rec.Attempt, LeaseID: rec.LeaseID}, meta, body}
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if err := d.Finish(ctx, driver.Shared, driver.FinishParams{Fence: wants[i].fence, State: idemtype.StateSucceeded, Status: 201,
				Meta: wants[i].meta, Body: wants[i].body}); err != nil {
				t.Errorf("finish %s: %v", wants[i].fence.Key, err)
			}
		})
	}
	wg.Wait()
	if large.Load() == 0 {
		t.Fatal("no large write reached a committer: the test does not exercise execLarge")
	}
	for _, w := range wants {
		rec, err := d.Get(ctx, "large", w.fence.Key)
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != idemtype.StateSucceeded || rec.Status != 201 || !bytes.Equal(rec.Body, w.body) || !bytes.Equal(rec.Meta, w.meta) || (w.meta == nil) != (rec.Meta == nil) {
			t.Errorf("%s: state %s status %d, body %d bytes (want %d, equal %v), meta %q (want %q)",
				w.fence.Key, rec.State, rec.Status, len(rec.Body), len(w.body), bytes.Equal(rec.Body, w.body), rec.Meta, w.meta)
		}
	}
	// A stale fence on a large completion: nothing written.
	stale := wants[1]
	stale.fence.LeaseID++
	var fenced atomic.Int64
	for range 8 { // at once, so that the committers take them
		wg.Go(func() {
			err := d.Finish(ctx, driver.Shared, driver.FinishParams{Fence: stale.fence, State: idemtype.StateFailed, Status: 500, Body: bytes.Repeat([]byte("y"), largeWrite)})
			if errors.Is(err, driver.ErrFenced) {
				fenced.Add(1)
			} else {
				t.Errorf("stale large finish: %v, want ErrFenced", err)
			}
		})
	}
	wg.Wait()
	if rec, err := d.Get(ctx, "large", stale.fence.Key); err != nil || !bytes.Equal(rec.Body, stale.body) || rec.Status != 201 {
		t.Errorf("after stale finishes: status %d, body equal %v, %v", rec.Status, bytes.Equal(rec.Body, stale.body), err)
	}
}
