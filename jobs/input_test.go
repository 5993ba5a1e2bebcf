package jobs_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/jobs"
)

// Bad input is refused with an error naming what is wrong, before anything
// is written.
func TestBadInput(t *testing.T) {
	forEachDriver(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		ws := jobs.NewWorkers()
		jobs.AddWorker(ws, effectWorker("w"))
		c, err := jobs.New(e.l, &jobs.Config{Workers: ws, MaxArgsBytes: 1024, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		cases := []struct {
			name string
			args jobs.Args
			opts *jobs.EnqueueOpts
			want string // in the message
			is   error
		}{
			{"unknown queue", testArgs{}, &jobs.EnqueueOpts{Queue: "emails"}, `unknown queue "emails"`, jobs.ErrUnknownQueue},
			{"negative delay", testArgs{}, &jobs.EnqueueOpts{Delay: -time.Second}, "delay -1s must not be negative", idem.ErrInvalid},
			{"delay and run at", testArgs{}, &jobs.EnqueueOpts{Delay: time.Second, RunAt: time.Now()}, "set one", idem.ErrInvalid},
			{"oversized args", jobs.Raw{Name: "test", Data: make([]byte, 1025)}, nil, "1025 bytes, more than the limit of 1024", idem.ErrInvalid},
			{"nil args", nil, nil, "args must not be nil", idem.ErrInvalid},
			{"empty kind", jobs.Raw{Data: []byte("x")}, nil, "kind must not be empty", idem.ErrInvalid},
			{"unregistered kind", jobs.Raw{Name: "tset", Data: []byte("x")}, nil, `"tset" has no worker`, idem.ErrInvalid},
			{"long unique key", testArgs{}, &jobs.EnqueueOpts{UniqueKey: strings.Repeat("k", 256)}, "256 bytes, longer than 255", idem.ErrInvalid},
			{"control char in key", testArgs{}, &jobs.EnqueueOpts{UniqueKey: "a\nb"}, "control character", idem.ErrInvalid},
			{"negative attempts", testArgs{}, &jobs.EnqueueOpts{MaxAttempts: -1}, "max attempts -1", idem.ErrInvalid},
		}
		for _, tc := range cases {
			_, err := c.Enqueue(ctx, tc.args, tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, tc.is) || !errors.Is(err, idem.ErrInvalid) {
				t.Errorf("%s: %v; want an error containing %q matching %v", tc.name, err, tc.want, tc.is)
			}
		}
		if _, err := c.EnqueueTx(ctx, nil, testArgs{}, nil); !errors.Is(err, idem.ErrInvalid) {
			t.Errorf("nil tx: %v", err)
		}
		if n := e.count(t, `SELECT count(*) FROM idem_jobs`); n != 0 {
			t.Fatalf("bad input wrote %d jobs", n)
		}

		for name, cfg := range map[string]*jobs.Config{
			"lease too short":  {Lease: time.Millisecond},
			"bad queue name":   {Queues: map[string]jobs.QueueConfig{"a b": {}}},
			"no queues":        {Queues: map[string]jobs.QueueConfig{}},
			"negative workers": {Queues: map[string]jobs.QueueConfig{"q": {MaxWorkers: -1}}},
			"attempts":         {MaxAttempts: 1001},
			"retention":        {Retention: -2},
			"args limit":       {MaxArgsBytes: 1 << 30},
		} {
			if _, err := jobs.New(e.l, cfg); !errors.Is(err, idem.ErrInvalid) {
				t.Errorf("config %s: %v, want ErrInvalid", name, err)
			}
		}
		if _, err := jobs.New(nil, nil); !errors.Is(err, idem.ErrInvalid) {
			t.Errorf("nil ledger: %v", err)
		}
		producerOnly := newProducer(t, e)
		if err := producerOnly.Start(ctx); !errors.Is(err, idem.ErrInvalid) {
			t.Errorf("Start without workers: %v", err)
		}
		if _, err := c.Get(ctx, 12345); !errors.Is(err, jobs.ErrNotFound) {
			t.Errorf("Get of a missing job: %v", err)
		}
	})
}

func TestAddWorkerPanicsOnSetupMistakes(t *testing.T) {
	ws := jobs.NewWorkers()
	jobs.AddWorker(ws, effectWorker("w"))
	for name, add := range map[string]func(){
		"duplicate kind": func() { jobs.AddWorker(ws, effectWorker("w")) },
		"raw without kind": func() {
			jobs.AddWorker(ws, jobs.WorkFunc(func(context.Context, *jobs.Job[jobs.Raw]) error { return nil }))
		},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			add()
		}()
	}
}
