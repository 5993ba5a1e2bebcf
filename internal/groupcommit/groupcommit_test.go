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
