package idemgrpc_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemdev/idem/idemgrpc"
)

// fastRetries retries often and quickly, for tests.
var fastRetries = &idemgrpc.ClientOptions{MaxAttempts: 8, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}

// flaky is an outer server interceptor that answers attempt n with
// script[n-1]: "fail before" (Unavailable without calling the inner
// chain), "lose answer" (run the inner chain, then answer Unavailable as if
// the connection broke after the effect), or "" (pass). It records the key
// of every attempt.
type flaky struct {
	mu     sync.Mutex
	script []string
	keys   []string
}

func (f *flaky) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	f.mu.Lock()
	f.keys = append(f.keys, md.Get("idempotency-key")...)
	step := ""
	if n := len(f.keys); n <= len(f.script) {
		step = f.script[n-1]
	}
	f.mu.Unlock()
	switch step {
	case "fail before":
		return nil, status.Error(codes.Unavailable, "flaky: connection refused")
	case "lose answer":
		next(ctx, req)
		return nil, status.Error(codes.Unavailable, "flaky: connection reset after the call")
	}
	return next(ctx, req)
}

// The client interceptor makes one key and retries through failures before
// and after the effect with that key: exactly one effect, and the last
// attempt gets the first run's answer.
func TestClientRetriesWithSameKey(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	h := &counted{}
	f := &flaky{script: []string{"fail before", "lose answer", "lose answer"}}
	srv := serve(t, h.handle, f.intercept, idemgrpc.UnaryServerInterceptor(l, shared))
	cc := dial(t, srv.Target(), grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(fastRetries)))

	r := call(testCtx(t), cc, chargeMethod, "", "42 EUR")
	if r.err != nil || r.out.GetValue() != "done:42 EUR" || !r.replayed {
		t.Fatalf("got %+v", r)
	}
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
	if len(f.keys) != 4 {
		t.Fatalf("%d attempts, want 4", len(f.keys))
	}
	for _, k := range f.keys {
		if k != f.keys[0] {
			t.Fatalf("attempts used keys %q, want one key", f.keys)
		}
	}
	if u, err := uuid.Parse(f.keys[0]); err != nil || u.Version() != 4 {
		t.Fatalf("key %q is not a UUIDv4", f.keys[0])
	}
}

// A key the caller set is kept; a second logical call gets a new key.
func TestClientKeepsCallersKey(t *testing.T) {
	t.Parallel()
	f := &flaky{}
	srv := serve(t, (&counted{}).handle, f.intercept)
	cc := dial(t, srv.Target(), grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(nil)))
	ctx := testCtx(t)
	call(ctx, cc, chargeMethod, "mine", "x")
	call(ctx, cc, chargeMethod, "", "x")
	call(ctx, cc, chargeMethod, "", "x")
	if len(f.keys) != 3 || f.keys[0] != "mine" || f.keys[1] == f.keys[2] {
		t.Fatalf("keys %q: want mine, then two different generated keys", f.keys)
	}
}

// Answers are not retried; retryable codes are retried at most MaxAttempts
// times; unguarded methods get no key and one attempt.
func TestClientRetriesOnlyRetryableCodes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		code     codes.Code
		attempts int
	}{
		{codes.InvalidArgument, 1},
		{codes.FailedPrecondition, 1},
		{codes.Internal, 1},
		{codes.ResourceExhausted, 1},
		{codes.Unavailable, 3},
		{codes.Aborted, 3},
	} {
		h := &counted{fail: func(int64) error { return status.Error(c.code, "no") }}
		f := &flaky{}
		srv := serve(t, h.handle, f.intercept)
		opts := *fastRetries
		opts.MaxAttempts = 3
		opts.Methods = func(m string) bool { return m == chargeMethod }
		cc := dial(t, srv.Target(), grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(&opts)))
		ctx := testCtx(t)
		if r := call(ctx, cc, chargeMethod, "", "x"); status.Code(r.err) != c.code || len(f.keys) != c.attempts {
			t.Errorf("%v: got %v after %d attempts, want %d", c.code, r.err, len(f.keys), c.attempts)
		}
		if r := call(ctx, cc, refundMethod, "", "x"); status.Code(r.err) != c.code || h.runs.Load() != int64(c.attempts)+1 || len(f.keys) != c.attempts {
			t.Errorf("%v: unguarded method: %v after %d runs with keys %q", c.code, r.err, h.runs.Load(), f.keys)
		}
	}
}

// An attempt cut off by PerAttempt is retried with the same key: the first
// run's claim is left to its (short) lease, the retry is told it is in
// flight, then reclaims the key and runs.
func TestClientPerAttemptTimeout(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	h := &counted{}
	handle := func(ctx context.Context, method string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		if h.runs.Load() == 0 {
			h.runs.Add(1)
			<-ctx.Done() // the first run hangs until the attempt's deadline
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return h.handle(ctx, method, in)
	}
	f := &flaky{}
	opts := &idemgrpc.Options{SharedScope: true, Lease: 200 * time.Millisecond, Logger: quiet}
	srv := serve(t, handle, f.intercept, idemgrpc.UnaryServerInterceptor(l, opts))
	copts := &idemgrpc.ClientOptions{MaxAttempts: 100, PerAttempt: 100 * time.Millisecond, BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond}
	cc := dial(t, srv.Target(), grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor(copts)))

	r := call(testCtx(t), cc, chargeMethod, "", "x")
	if r.err != nil || r.out.GetValue() != "done:x" {
		t.Fatalf("got %+v", r)
	}
	if n := h.runs.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2 (a hung run, then the run after its lease)", n)
	}
	for _, k := range f.keys {
		if k != f.keys[0] {
			t.Fatalf("attempts used keys %q, want one key", f.keys)
		}
	}
}
