package tracing_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
	"github.com/idemdev/idem/idemtype"
	"github.com/idemdev/idem/tracing"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func setup(t *testing.T) (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return rec, tp
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestEventBecomesChildSpanEndingNow(t *testing.T) {
	t.Parallel()
	rec, tp := setup(t)
	tr := tp.Tracer("test")
	ctx, parent := tr.Start(context.Background(), "request")
	obs := tracing.Observer(tr, &tracing.Options{Driver: "postgres"})

	op := idem.Op{Scope: "acct-1", Key: "order-42", Fingerprint: "jcs-sha256:ab"}
	obs(ctx, idem.Event{Kind: idem.EventClaim, Op: op, Outcome: idem.Acquired, Attempt: 1, Took: 3 * time.Millisecond})
	obs(ctx, idem.Event{Kind: idem.EventFinish, Op: op, State: idemtype.StateSucceeded, Attempt: 1, Took: time.Millisecond})
	parent.End()

	spans := rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3", len(spans))
	}
	claim, done := spans[0], spans[1]
	if claim.Name() != tracing.SpanClaim || done.Name() != tracing.SpanComplete {
		t.Fatalf("span names %q, %q", claim.Name(), done.Name())
	}
	for _, s := range []sdktrace.ReadOnlySpan{claim, done} {
		if s.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("%s: parent %v, want the request span", s.Name(), s.Parent().SpanID())
		}
	}
	if got := claim.EndTime().Sub(claim.StartTime()); got != 3*time.Millisecond {
		t.Errorf("claim span lasts %v, want Took (3ms)", got)
	}
	a := attrs(claim)
	want := map[attribute.Key]string{
		tracing.AttrScope: "acct-1", tracing.AttrKey: "order-42", tracing.AttrFingerprint: "jcs-sha256:ab",
		tracing.AttrOutcome: "acquired", tracing.AttrDBSystem: "postgresql",
	}
	for k, v := range want {
		if a[k].AsString() != v {
			t.Errorf("claim %s = %q, want %q", k, a[k].AsString(), v)
		}
	}
	if a[tracing.AttrAttempt].AsInt64() != 1 {
		t.Errorf("claim attempt = %v", a[tracing.AttrAttempt])
	}
	if attrs(done)[tracing.AttrState].AsString() != "succeeded" {
		t.Errorf("complete state = %v", attrs(done)[tracing.AttrState])
	}
}

func TestErrorsAndHashedKeys(t *testing.T) {
	t.Parallel()
	rec, tp := setup(t)
	obs := tracing.Observer(tp.Tracer("test"), &tracing.Options{HashKeys: true})
	op := idem.Op{Key: "alice@example.com"}
	ctx := context.Background()
	obs(ctx, idem.Event{Kind: idem.EventClaim, Op: op, Err: errors.New("connection reset")})
	obs(ctx, idem.Event{Kind: idem.EventClaim, Op: op, Err: idem.ErrExpired})
	obs(ctx, idem.Event{Kind: idem.EventLeaseLost, Op: op, State: idemtype.StateSucceeded})
	obs(ctx, idem.Event{Kind: idem.EventLeaseLost, Op: op})
	obs(ctx, idem.Event{Kind: idem.EventPrune, Tombstoned: 3, Deleted: 1})

	spans := rec.Ended()
	if len(spans) != 5 {
		t.Fatalf("%d spans, want 5", len(spans))
	}
	if s := spans[0]; s.Status().Code != codes.Error || attrs(s)[tracing.AttrOutcome].AsString() != "error" {
		t.Errorf("failed claim: status %v, outcome %v", s.Status(), attrs(s)[tracing.AttrOutcome])
	}
	if s := spans[1]; s.Status().Code == codes.Error || attrs(s)[tracing.AttrOutcome].AsString() != "expired" {
		t.Errorf("expired claim is a refusal, not an error: status %v, outcome %v", s.Status(), attrs(s)[tracing.AttrOutcome])
	}
	if s := spans[2]; s.Name() != tracing.SpanComplete || s.Status().Code != codes.Error {
		t.Errorf("lost lease at complete: %s %v", s.Name(), s.Status())
	}
	if s := spans[3]; s.Name() != tracing.SpanHeartbeat {
		t.Errorf("lost lease at heartbeat: %s", s.Name())
	}
	if s := spans[4]; s.Name() != tracing.SpanPrune || attrs(s)[tracing.AttrTombstoned].AsInt64() != 3 {
		t.Errorf("prune span: %s %v", s.Name(), attrs(s))
	}
	for _, s := range spans[:4] {
		if got := attrs(s)[tracing.AttrKey].AsString(); got != idem.KeyHash("alice@example.com") {
			t.Errorf("%s: key %q, want its hash", s.Name(), got)
		}
	}
}

// TestLedgerSpans runs a real ledger with the observer: the claim and the
// completion of Do become children of the caller's span.
func TestLedgerSpans(t *testing.T) {
	t.Parallel()
	rec, tp := setup(t)
	tr := tp.Tracer("test")
	ctx := context.Background()
	l, err := dburl.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "idem.db"), &idem.Options{Observer: tracing.Observer(tr, nil)})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, parent := tr.Start(ctx, "handler")
	c, err := l.Claim(ctx, idem.Op{Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Complete(ctx, c, idem.Result{Status: 200}); err != nil {
		t.Fatal(err)
	}
	parent.End()
	var names []string
	for _, s := range rec.Ended() {
		names = append(names, s.Name())
		if s.Name() != "handler" && s.Parent().TraceID() != parent.SpanContext().TraceID() {
			t.Errorf("%s is not in the handler's trace", s.Name())
		}
	}
	if len(names) != 3 || names[0] != tracing.SpanClaim || names[1] != tracing.SpanComplete {
		t.Errorf("spans %v", names)
	}
}

func TestStartCarriesTheSameAttributes(t *testing.T) {
	t.Parallel()
	rec, tp := setup(t)
	_, span := tracing.Start(context.Background(), tp.Tracer("test"), "idem.forward", idem.Op{Scope: "s", Key: "k", Fingerprint: "f"}, 2, nil)
	span.End()
	a := attrs(rec.Ended()[0])
	if a[tracing.AttrKey].AsString() != "k" || a[tracing.AttrAttempt].AsInt64() != 2 || a[tracing.AttrScope].AsString() != "s" {
		t.Errorf("forward span attributes %v", a)
	}
}

func TestObserversCallsEachInOrder(t *testing.T) {
	t.Parallel()
	var got []string
	obs := idem.Observers(nil, func(_ context.Context, e idem.Event) { got = append(got, "a:"+string(e.Kind)) }, nil,
		func(_ context.Context, e idem.Event) { got = append(got, "b:"+string(e.Kind)) })
	obs(context.Background(), idem.Event{Kind: idem.EventClaim})
	if len(got) != 2 || got[0] != "a:claim" || got[1] != "b:claim" {
		t.Errorf("calls %v", got)
	}
}
