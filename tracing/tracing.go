// Package tracing turns idem's events into OpenTelemetry spans, through the
// OpenTelemetry API only: nothing is exported unless the program installs a
// TracerProvider with an exporter, and nothing is traced unless it passes
// an Observer from here to idem.Options.
//
//	tr := otel.Tracer("github.com/idemdev/idem")
//	l, err := dburl.Open(ctx, url, &idem.Options{
//		Observer: idem.Observers(m.Observer(), tracing.Observer(tr, nil)),
//	})
//
// The ledger reports an operation when it has ended, so each span is made
// after the fact, starting Took before the event and ending at it, as a
// child of the span in the operation's context. Spans carry the same
// attributes as the ledger's log lines: scope, key (or its KeyHash),
// fingerprint and attempt, plus the outcome, state or verdict. Faces that
// do work of their own (the gateway forwarding upstream) open a live span
// with Start.
package tracing

import (
	"context"
	"errors"
	"time"

	"github.com/idemdev/idem"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Attribute keys on every span.
const (
	AttrScope       = attribute.Key("idem.scope")
	AttrKey         = attribute.Key("idem.key")
	AttrFingerprint = attribute.Key("idem.fingerprint")
	AttrAttempt     = attribute.Key("idem.attempt")
	AttrOutcome     = attribute.Key("idem.outcome")
	AttrState       = attribute.Key("idem.state")
	AttrVerdict     = attribute.Key("idem.verdict")
	AttrTombstoned  = attribute.Key("idem.prune.tombstoned")
	AttrDeleted     = attribute.Key("idem.prune.deleted")
	AttrDBSystem    = attribute.Key("db.system.name")
)

// Options adjusts the spans. Nil means defaults.
type Options struct {
	// HashKeys records idem.KeyHash(key) instead of the key, as
	// idem.Options.HashKeysInLogs does for logs.
	HashKeys bool
	// Driver, when set ("sqlite", "postgres"), is recorded as
	// db.system.name ("sqlite", "postgresql").
	Driver string
}

// Span names, one per kind of event (plus Start's, chosen by the caller).
const (
	SpanClaim     = "idem.claim"
	SpanComplete  = "idem.complete" // complete, fail, release or park (see idem.state)
	SpanHeartbeat = "idem.heartbeat"
	SpanReconcile = "idem.reconcile"
	SpanResolve   = "idem.resolve"
	SpanPrune     = "idem.prune"
)

// Observer returns an idem.Observer that records each event as a span of
// tracer. It does not block: ending a span hands it to the provider's
// span processor, which batches exports in the background.
func Observer(tracer trace.Tracer, opts *Options) idem.Observer {
	var o Options
	if opts != nil {
		o = *opts
	}
	return func(ctx context.Context, e idem.Event) { o.record(ctx, tracer, e) }
}

func (o Options) record(ctx context.Context, tracer trace.Tracer, e idem.Event) {
	end := time.Now()
	attrs := o.Attributes(e.Op, e.Attempt)
	var name string
	var err error
	switch e.Kind {
	case idem.EventClaim:
		name = SpanClaim
		outcome := e.Outcome.String()
		switch ce := (*idem.ConflictError)(nil); {
		case errors.Is(e.Err, idem.ErrExpired):
			outcome = "expired" // a refusal, not a failure
		case e.Err != nil && !errors.As(e.Err, &ce):
			outcome, err = "error", e.Err
		}
		attrs = append(attrs, AttrOutcome.String(outcome))
	case idem.EventFinish:
		name, err = SpanComplete, e.Err
		attrs = append(attrs, AttrState.String(string(e.State)))
	case idem.EventLeaseLost:
		name, err = SpanComplete, idem.ErrLeaseLost
		if e.State == "" {
			name = SpanHeartbeat
		} else {
			attrs = append(attrs, AttrState.String(string(e.State)))
		}
	case idem.EventReconcile:
		name, err = SpanReconcile, e.Err
		attrs = append(attrs, AttrVerdict.String(e.Verdict.String()))
	case idem.EventResolve:
		name, err = SpanResolve, e.Err
		attrs = append(attrs, AttrState.String(string(e.State)))
	case idem.EventPrune:
		name, err = SpanPrune, e.Err
		attrs = []attribute.KeyValue{AttrTombstoned.Int(e.Tombstoned), AttrDeleted.Int(e.Deleted)}
		if s := o.dbSystem(); s != "" {
			attrs = append(attrs, AttrDBSystem.String(s))
		}
	default:
		return
	}
	_, span := tracer.Start(ctx, name, trace.WithTimestamp(end.Add(-e.Took)),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	if err != nil {
		span.RecordError(err, trace.WithTimestamp(end))
		span.SetStatus(codes.Error, err.Error())
	}
	span.End(trace.WithTimestamp(end))
}

// Attributes returns the attributes idem puts on a span about op: scope,
// key (hashed under HashKeys), fingerprint, attempt (when > 0) and the
// database system (when Driver is set).
func (o Options) Attributes(op idem.Op, attempt int64) []attribute.KeyValue {
	key := op.Key
	if o.HashKeys {
		key = idem.KeyHash(key)
	}
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, AttrScope.String(op.Scope), AttrKey.String(key), AttrFingerprint.String(op.Fingerprint))
	if attempt > 0 {
		attrs = append(attrs, AttrAttempt.Int64(attempt))
	}
	if s := o.dbSystem(); s != "" {
		attrs = append(attrs, AttrDBSystem.String(s))
	}
	return attrs
}

func (o Options) dbSystem() string {
	if o.Driver == "postgres" {
		return "postgresql"
	}
	return o.Driver
}

// Start opens a live span about op, for work a face does itself: the
// gateway wraps its upstream call in Start(ctx, tr, "idem.forward", op, …).
// The caller ends the span. A nil opts means defaults.
func Start(ctx context.Context, tracer trace.Tracer, name string, op idem.Op, attempt int64, opts *Options) (context.Context, trace.Span) {
	var o Options
	if opts != nil {
		o = *opts
	}
	return tracer.Start(ctx, name, trace.WithAttributes(o.Attributes(op, attempt)...))
}
