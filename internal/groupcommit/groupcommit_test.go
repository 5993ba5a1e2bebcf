package groupcommit

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// recordBatches commits by answering every write: an error for the key
// "fail", nil for others; batches lists the keys of every batch.
func recordBatches(t *testing.T) (commit func([]*Write), batches func() [][]string) {
	var (
		mu  sync.Mutex
		got [][]string
	)
	commit = func(b []*Write) {
		b = Live(b)
		var keys []string
		for _, w := range b {
			keys = append(keys, w.Key)
		}
		mu.Lock()
		got = append(got, keys)
		mu.Unlock()
		for _, w := range b {
			if w.Key == "fail" {
				w.Answer(errors.New("failed"))
				continue
			}
			w.Answer(nil)
		}
	}
	return commit, func() [][]string {
		mu.Lock()
		defer mu.Unlock()
		return append([][]string(nil), got...)
	}
}

func TestEachCallerGetsItsOwnAnswer(t *testing.T) {
	t.Parallel()
	commit, batches := recordBatches(t)
	q := New(Config{Max: 8}, commit)
	defer q.Close()
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			key := "ok"
			if i%10 == 0 {
				key = "fail"
			}
			err := q.Do(context.Background(), &Write{Key: key})
			if (err != nil) != (key == "fail") {
				t.Errorf("write %d (%s): %v", i, key, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	n := 0
	for _, b := range batches() {
		if len(b) > 8 {
			t.Errorf("batch of %d, max 8", len(b))
		}
		n += len(b)
	}
	if n != 100 {
		t.Errorf("%d writes committed, want 100", n)
	}
}

func TestLoneCallerRunsAlone(t *testing.T) {
	t.Parallel()
	commit, batches := recordBatches(t)
	alone := 0
	q := New(Config{Max: 8, Alone: func(ctx context.Context, w *Write) error { alone++; return nil }}, commit)
	defer q.Close()
	for range 10 {
		if err := q.Do(context.Background(), &Write{Key: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	if alone != 10 || len(batches()) != 0 {
		t.Fatalf("%d writes ran alone, %d batches; want 10 alone, no batch", alone, len(batches()))
	}
}

func TestCancelledBeforeTakenIsNotRun(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	ran := make(chan string, 10)
	q := New(Config{Max: 8}, func(b []*Write) {
		<-release
		for _, w := range Live(b) {
			ran <- w.Key
			w.Answer(nil)
		}
	})
	defer q.Close()
	first := make(chan error)
	go func() { first <- q.Do(context.Background(), &Write{Key: "first"}) }()
	// The committer holds "first" until release; a second write waits to be
	// taken, and its caller gives up.
	ctx, cancel := context.WithCancel(context.Background())
	second := make(chan error)
	go func() { second <- q.Do(ctx, &Write{Key: "second"}) }()
	cancel()
	if err := <-second; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled write: %v", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	q.Close()
	close(ran)
	for k := range ran {
		if k == "second" {
			t.Fatal("a write whose caller gave up before it was taken ran")
		}
	}
}

func TestClosed(t *testing.T) {
	t.Parallel()
	commit, _ := recordBatches(t)
	q := New(Config{Max: 8}, commit)
	q.Close()
	if err := q.Do(context.Background(), &Write{Key: "k"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Do after Close: %v", err)
	}
}

// TestLoneCallerNeverWaits: one write at a time makes batches of one, and
// a batch after a batch of one waits for nobody, however long Wait is.
func TestLoneCallerNeverWaits(t *testing.T) {
	t.Parallel()
	commit, batches := recordBatches(t)
	q := New(Config{Max: 64, Wait: time.Hour}, commit)
	defer q.Close()
	for range 20 {
		if err := q.Do(context.Background(), &Write{Key: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(batches()); n != 20 {
		t.Fatalf("%d batches, want 20 of one", n)
	}
}

// TestWaitIsBounded: after a large batch, a smaller one waits for the
// callers to come back, but no longer than Wait.
func TestWaitIsBounded(t *testing.T) {
	t.Parallel()
	commit, batches := recordBatches(t)
	q := New(Config{Max: 64, Wait: 20 * time.Millisecond}, commit)
	defer q.Close()
	for round := range 5 {
		var wg sync.WaitGroup
		for range 16 >> round {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := q.Do(context.Background(), &Write{Key: "k"}); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
	}
	total := 0
	for _, b := range batches() {
		total += len(b)
	}
	if total != 16+8+4+2+1 {
		t.Fatalf("%d writes in %v", total, batches())
	}
}

// Config.MaxBytes: a batch stops gathering at the write that takes its
// arguments' bytes to the bound, so large writes go in small batches while
// small ones still gather by the dozen.
func TestMaxBytesBoundsABatch(t *testing.T) {
	t.Parallel()
	const n, bound, big = 80, 3000, 1000
	release := make(chan struct{})
	var (
		mu      sync.Mutex
		batches [][]int // bytes of each write, per batch
	)
	q := New(Config{Max: 64, MaxBytes: bound}, func(b []*Write) {
		<-release
		b = Live(b)
		var sizes []int
		for _, w := range b {
			sizes = append(sizes, argBytes(w.Args))
		}
		mu.Lock()
		batches = append(batches, sizes)
		mu.Unlock()
		for _, w := range b {
			w.Answer(nil)
		}
	})
	defer q.Close()
	var wg sync.WaitGroup
	for i := range n {
		args := []any{"k", int64(i)} // 1 byte
		if i%2 == 0 {
			args = append(args, make([]byte, big))
		}
		wg.Go(func() {
			if err := q.Do(context.Background(), &Write{Key: "k", Args: args}); err != nil {
				t.Error(err)
			}
		})
	}
	for q.active.Load() < n { // every write submitted: the batches after the first gather from all of them
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	total, most := 0, 0
	for _, b := range batches {
		sum := 0
		for _, s := range b[:len(b)-1] {
			sum += s
		}
		if sum >= bound {
			t.Errorf("batch %v: %d bytes before its last write, bound %d", b, sum, bound)
		}
		total += len(b)
		most = max(most, len(b))
	}
	if total != n || most < 4 {
		t.Errorf("%d writes in %d batches, the largest %d; want %d, gathered", total, len(batches), most, n)
	}
}

// TestAbandonedWriteRecordsNothing: a caller whose context ends after its
// write was taken gets its error at once, and from then on the committer,
// which still runs the statement, must not call the caller's Row or Exec:
// they record into the caller's variables, which the caller may now read
// (a data race under -race, and a wrong answer otherwise).
func TestAbandonedWriteRecordsNothing(t *testing.T) {
	t.Parallel()
	taken := make(chan struct{})
	release := make(chan struct{})
	scanned := make(chan bool, 2)
	q := New(Config{Max: 8}, func(b []*Write) {
		close(taken)
		<-release
		for _, w := range b {
			var s fakeRow
			err := w.Scan(&s)
			scanned <- s.read
			w.Answer(err)
		}
	})
	defer q.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var got string
	w := &Write{Key: "k", Row: func(r Scanner) error { got = "recorded"; return r.Scan(new(int)) }}
	done := make(chan error)
	go func() { done <- q.Do(ctx, w) }()
	<-taken
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("abandoned write: %v", err)
	}
	close(release)
	if !<-scanned {
		t.Fatal("the abandoned write's row was not read (a pipeline would be left with it)")
	}
	q.Close()
	if got != "" { // read after Do returned, while the committer ran: -race checks it too
		t.Fatalf("the committer recorded into an abandoned caller's variable: %q", got)
	}
}

// fakeRow is a Scanner that notes it was read.
type fakeRow struct{ read bool }

func (r *fakeRow) Scan(...any) error { r.read = true; return nil }
