package idemgrpc_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/fingerprint"
	"github.com/idemdev/idem/idemgrpc"
)

var shared = &idemgrpc.Options{SharedScope: true, Logger: quiet}

// The first call runs the handler; a retry gets its answer, byte for byte,
// with idempotent-replayed: true, and the handler does not run again.
func TestFirstCallRunsOnceThenReplays(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		h := &counted{}
		cc := serve(t, h.handle, idemgrpc.UnaryServerInterceptor(l, shared))
		ctx := testCtx(t)

		first := call(ctx, cc, chargeMethod, "order-1", "100 EUR")
		if first.err != nil || first.replayed {
			t.Fatalf("first call: %+v", first)
		}
		second := call(ctx, cc, chargeMethod, "order-1", "100 EUR")
		if second.err != nil || !second.replayed {
			t.Fatalf("retry: %+v", second)
		}
		a, _ := proto.MarshalOptions{Deterministic: true}.Marshal(first.out)
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(second.out)
		if string(a) != string(b) || second.out.GetValue() != "done:100 EUR" {
			t.Fatalf("replay %q differs from first answer %q", b, a)
		}
		if n := h.runs.Load(); n != 1 {
			t.Fatalf("handler ran %d times, want 1", n)
		}
		// A call without a key is not guarded: it runs every time.
		call(ctx, cc, chargeMethod, "", "100 EUR")
		call(ctx, cc, chargeMethod, "", "100 EUR")
		if n := h.runs.Load(); n != 3 {
			t.Fatalf("handler ran %d times, want 3", n)
		}
	})
}

// 64 identical calls at once: the handler runs once; every other call is
// told the first is in flight (Aborted, with a retry hint).
func TestConcurrentDuplicatesRunOnce(t *testing.T) {
	t.Parallel()
	eachDriver(t, func(t *testing.T, l *idem.Ledger) {
		const n = 64
		release := make(chan struct{})
		h := &counted{fail: func(int64) error { <-release; return nil }}
		cc := serve(t, h.handle, idemgrpc.UnaryServerInterceptor(l, shared))
		ctx := testCtx(t)

		start := make(chan struct{})
		replies := make(chan reply, n)
		for range n {
			go func() {
				<-start
				replies <- call(ctx, cc, chargeMethod, "same", "x")
			}()
		}
		close(start)
		// The handler blocks until the others answered, so all of them
		// see the key in flight.
		for range n - 1 {
			r := <-replies
			wantCode(t, r.err, codes.Aborted, idemgrpc.ReasonInFlight)
		}
		close(release)
		if r := <-replies; r.err != nil || r.out.GetValue() != "done:x" {
			t.Fatalf("the call that ran: %+v", r)
		}
		if got := h.runs.Load(); got != 1 {
			t.Fatalf("handler ran %d times, want 1", got)
		}
	})
}

// The same key with another request message, or on another method, is
// refused and the stored answer is untouched.
func TestMismatch(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	h := &counted{}
	cc := serve(t, h.handle, idemgrpc.UnaryServerInterceptor(l, shared))
	ctx := testCtx(t)

	call(ctx, cc, chargeMethod, "k", "100 EUR")
	wantCode(t, call(ctx, cc, chargeMethod, "k", "200 EUR").err, codes.FailedPrecondition, idemgrpc.ReasonKeyMismatch)
	wantCode(t, call(ctx, cc, refundMethod, "k", "100 EUR").err, codes.FailedPrecondition, idemgrpc.ReasonKeyMismatch)
	if r := call(ctx, cc, chargeMethod, "k", "100 EUR"); !r.replayed || r.out.GetValue() != "done:100 EUR" {
		t.Fatalf("after mismatches: %+v", r)
	}
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

// A malformed key is refused before any database access: the interceptor
// here has no ledger at all.
func TestBadKey(t *testing.T) {
	t.Parallel()
	h := &counted{}
	cc := serve(t, h.handle, idemgrpc.UnaryServerInterceptor(nil, shared))
	ctx := testCtx(t)
	for name, md := range map[string][]string{
		"too long":   {"idempotency-key", strings.Repeat("k", 256)},
		"comma":      {"idempotency-key", "a,b"},
		"inner":      {"idempotency-key", "a b"},
		"bad quote":  {"idempotency-key", `"abc`},
		"empty":      {"idempotency-key", ""},
		"sent twice": {"idempotency-key", "a", "idempotency-key", "b"},
	} {
		r := call(ctx, cc, chargeMethod, "", "x", md...)
		if status.Code(r.err) != codes.InvalidArgument || reason(r.err) != idemgrpc.ReasonKeyInvalid {
			t.Errorf("%s: got %v, want InvalidArgument %s", name, r.err, idemgrpc.ReasonKeyInvalid)
		}
	}
	if n := h.runs.Load(); n != 0 {
		t.Fatalf("handler ran %d times, want 0", n)
	}
}

// RequireKey refuses a call without a key.
func TestRequireKey(t *testing.T) {
	t.Parallel()
	cc := serve(t, (&counted{}).handle, idemgrpc.UnaryServerInterceptor(nil, &idemgrpc.Options{SharedScope: true, RequireKey: true}))
	wantCode(t, call(testCtx(t), cc, chargeMethod, "", "x").err, codes.InvalidArgument, idemgrpc.ReasonKeyMissing)
}

// Without Options.Scope or SharedScope, a keyed call is refused (before any
// database access) with a message naming the option; a call without a key
// still passes through.
func TestNoScopeRefusesKeyedCalls(t *testing.T) {
	t.Parallel()
	h := &counted{}
	cc := serve(t, h.handle, idemgrpc.UnaryServerInterceptor(nil, nil))
	ctx := testCtx(t)
	r := call(ctx, cc, chargeMethod, "k", "x")
	wantCode(t, r.err, codes.FailedPrecondition, idemgrpc.ReasonScopeUnset)
	if !strings.Contains(status.Convert(r.err).Message(), "Options.Scope") {
		t.Fatalf("message does not name the option: %v", r.err)
	}
	if r := call(ctx, cc, chargeMethod, "", "x"); r.err != nil {
		t.Fatalf("call without a key: %v", r.err)
	}
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}

// Two scopes using one key get two independent executions; a scope
// function's error refuses the call.
func TestScopesAreSeparate(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	h := &counted{}
	scope := func(ctx context.Context) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if v := md.Get("tenant"); len(v) == 1 {
			return v[0], nil
		}
		return "", errors.New("no tenant")
	}
	cc := serve(t, h.handle, idemgrpc.UnaryServerInterceptor(l, &idemgrpc.Options{Scope: scope, Logger: quiet}))
	ctx := testCtx(t)
	a := call(ctx, cc, chargeMethod, "k", "x", "tenant", "a")
	b := call(ctx, cc, chargeMethod, "k", "x", "tenant", "b")
	if a.err != nil || b.err != nil || a.replayed || b.replayed {
		t.Fatalf("a %+v, b %+v", a, b)
	}
	if n := h.runs.Load(); n != 2 {
		t.Fatalf("handler ran %d times, want 2", n)
	}
	if r := call(ctx, cc, chargeMethod, "k", "x"); status.Code(r.err) != codes.Unauthenticated {
		t.Fatalf("no tenant: %v", r.err)
	}
}

// Bad options are reported by New.
func TestNewRejectsBadOptions(t *testing.T) {
	t.Parallel()
	scope := func(context.Context) (string, error) { return "", nil }
	for _, o := range []*idemgrpc.Options{
		{Scope: scope, SharedScope: true},
		{SharedScope: true, Lease: -1},
		{SharedScope: true, Retention: -1},
	} {
		if _, err := idemgrpc.New(nil, o); !errors.Is(err, idemgrpc.ErrBadOptions) {
			t.Errorf("%+v: got %v", o, err)
		}
	}
}

// What becomes of a key after the handler's error: codes that mean
// "nothing done, try later" free the key (the retry runs again);
// DeadlineExceeded and Canceled leave it claimed (outcome unknown); any
// other code is stored and replayed.
func TestErrorCodes(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	var mu sync.Mutex
	fail := map[string]error{} // value → error of its first run
	h := &counted{fail: func(int64) error { return nil }}
	handle := func(ctx context.Context, method string, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		mu.Lock()
		err, ok := fail[in.GetValue()]
		delete(fail, in.GetValue())
		mu.Unlock()
		if ok {
			h.runs.Add(1)
			return nil, err
		}
		return h.handle(ctx, method, in)
	}
	cc := serve(t, handle, idemgrpc.UnaryServerInterceptor(l, shared))
	ctx := testCtx(t)

	for _, c := range []struct {
		code codes.Code
		then string // "runs again", "replayed", "in flight"
		err  error  // what the handler returns; nil: a status with code
	}{
		{codes.Canceled, "in flight", context.Canceled},
		{codes.DeadlineExceeded, "in flight", context.DeadlineExceeded},
		{codes.Unavailable, "runs again", nil},
		{codes.ResourceExhausted, "runs again", nil},
		{codes.Aborted, "runs again", nil},
		{codes.Internal, "runs again", nil},
		{codes.Unknown, "runs again", nil},
		{codes.Unimplemented, "runs again", nil},
		{codes.DataLoss, "runs again", nil},
		{codes.DeadlineExceeded, "in flight", nil},
		{codes.Canceled, "in flight", nil},
		{codes.InvalidArgument, "replayed", nil},
		{codes.NotFound, "replayed", nil},
		{codes.AlreadyExists, "replayed", nil},
		{codes.PermissionDenied, "replayed", nil},
		{codes.FailedPrecondition, "replayed", nil},
		{codes.OutOfRange, "replayed", nil},
		{codes.Unauthenticated, "replayed", nil},
	} {
		v := c.code.String()
		if c.err == nil {
			c.err = status.Error(c.code, "first run fails")
		} else {
			v = "bare-" + v
		}
		mu.Lock()
		fail[v] = c.err
		mu.Unlock()
		before := h.runs.Load()
		if r := call(ctx, cc, chargeMethod, "key-"+v, v); status.Code(r.err) != c.code {
			t.Fatalf("%v: first call got %v", c.code, r.err)
		}
		r := call(ctx, cc, chargeMethod, "key-"+v, v)
		runs := h.runs.Load() - before
		switch c.then {
		case "runs again":
			if r.err != nil || runs != 2 || r.replayed {
				t.Errorf("%v: retry got %+v after %d runs; want a second run", c.code, r, runs)
			}
		case "replayed":
			if status.Code(r.err) != c.code || status.Convert(r.err).Message() != "first run fails" || !r.replayed || runs != 1 {
				t.Errorf("%v: retry got %+v after %d runs; want the stored status replayed", c.code, r, runs)
			}
		case "in flight":
			if status.Code(r.err) != codes.Aborted || runs != 1 {
				t.Errorf("%v: retry got %+v after %d runs; want Aborted (claim left to its lease)", c.code, r, runs)
			}
		}
	}
}

// Methods limits the guard to the methods it names.
func TestMethodsFilter(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	h := &counted{}
	opts := &idemgrpc.Options{SharedScope: true, Logger: quiet, Methods: func(m string) bool { return m == chargeMethod }}
	cc := serve(t, h.handle, idemgrpc.UnaryServerInterceptor(l, opts))
	ctx := testCtx(t)
	call(ctx, cc, refundMethod, "k", "x")
	call(ctx, cc, refundMethod, "k", "x")
	if n := h.runs.Load(); n != 2 {
		t.Fatalf("unguarded method ran %d times, want 2", n)
	}
}

// A parked key, an expired key, an unusable scope and a ledger that does
// not answer each get their code, and the handler does not run.
func TestLedgerStates(t *testing.T) {
	t.Parallel()
	l := openLedger(t, "sqlite")
	h := &counted{}
	scope := func(ctx context.Context) (string, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		return strings.Join(md.Get("tenant"), ""), nil
	}
	opts := &idemgrpc.Options{Scope: scope, Retention: time.Millisecond, Logger: quiet}
	cc := serve(t, h.handle, idemgrpc.UnaryServerInterceptor(l, opts))
	ctx := testCtx(t)

	// Parked: the first call's outcome is unknown and waits for an operator.
	req, _ := proto.MarshalOptions{Deterministic: true}.Marshal(wrapperspb.String("x"))
	c, err := l.Claim(ctx, idem.Op{Scope: "t", Key: "parked", Fingerprint: fingerprint.GRPC(chargeMethod, req)})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Park(ctx, c); err != nil {
		t.Fatal(err)
	}
	wantCode(t, call(ctx, cc, chargeMethod, "parked", "x", "tenant", "t").err, codes.FailedPrecondition, idemgrpc.ReasonParked)

	// Expired: past retention (1 ms here), within the tombstone window.
	if r := call(ctx, cc, chargeMethod, "old", "x", "tenant", "t"); r.err != nil {
		t.Fatal(r.err)
	}
	for {
		r := call(ctx, cc, chargeMethod, "old", "x", "tenant", "t")
		if status.Code(r.err) == codes.FailedPrecondition {
			wantCode(t, r.err, codes.FailedPrecondition, idemgrpc.ReasonKeyExpired)
			break
		}
		if !r.replayed {
			t.Fatalf("before expiry: %+v", r)
		}
		time.Sleep(time.Millisecond)
	}

	// A scope the ledger cannot store.
	wantCode(t, call(ctx, cc, chargeMethod, "k", "x", "tenant", strings.Repeat("t", 256)).err, codes.InvalidArgument, idemgrpc.ReasonScopeInvalid)

	// The ledger is gone: nothing handled, retry later. (A ledger of its
	// own, closed here and not again at cleanup.)
	gone, err := dburl.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "gone.db"), &idem.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	gone.Close()
	cc = serve(t, h.handle, idemgrpc.UnaryServerInterceptor(gone, opts))
	wantCode(t, call(ctx, cc, chargeMethod, "k", "x", "tenant", "t").err, codes.Unavailable, idemgrpc.ReasonLedgerUnavailable)
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
}
