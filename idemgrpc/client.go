package idemgrpc

import (
	"cmp"
	"context"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// ClientOptions configure UnaryClientInterceptor. Nil or zero fields mean
// the defaults.
type ClientOptions struct {
	// Methods, if set, reports whether a method (its full name) gets a key
	// and retries. Nil means every unary method called through the
	// interceptor. Other methods are called once, untouched.
	Methods func(fullMethod string) bool
	// MaxAttempts bounds the attempts of one logical call, the first
	// included. Default 5.
	MaxAttempts int
	// MaxElapsed bounds the whole logical call, attempts and waits, on top
	// of the caller's own deadline. Default 30 s.
	MaxElapsed time.Duration
	// PerAttempt bounds each attempt; an attempt cut off by it ends in
	// DeadlineExceeded and is retried. Zero means no bound of its own (the
	// caller's deadline and MaxElapsed still apply).
	PerAttempt time.Duration
	// BaseDelay is the backoff before the second attempt; it doubles with
	// each attempt up to MaxDelay, and each wait is drawn at random from
	// [delay/2, delay] (jitter). Default 100 ms.
	BaseDelay time.Duration
	// MaxDelay caps one wait. Default 5 s. A server's RetryInfo hint
	// (idemgrpc sends one with Aborted and Unavailable) raises a wait up to
	// the hint, still capped by MaxDelay.
	MaxDelay time.Duration
}

// UnaryClientInterceptor makes a guarded call one logical call: it attaches
// an idempotency key (a new UUIDv4, unless the caller already put
// MetadataKey in the outgoing metadata) and retries, with the same key,
// attempts that end in Unavailable, Aborted or DeadlineExceeded (the last
// only when an attempt's own PerAttempt bound cut it off, not the caller's
// deadline). Waits grow exponentially with jitter; attempts and total time
// are bounded, and the last attempt's error is returned.
//
// Why these codes: each can end an attempt whose effect did or did not
// happen on the server (the connection broke, the first attempt is still
// running, the attempt ran out of time), and the key makes retrying them
// safe on an idemgrpc server: the retry either runs the call for the first
// time or gets the first run's answer. Other codes are the answer.
//
// Turn off grpc-go's own retry policy (service config "retryPolicy") for
// these methods, or keep it: its transparent retries send the same
// metadata, hence the same key, so they are safe too; they only multiply
// the attempt count.
func UnaryClientInterceptor(opts *ClientOptions) grpc.UnaryClientInterceptor {
	var o ClientOptions
	if opts != nil {
		o = *opts
	}
	o.MaxAttempts = max(cmp.Or(o.MaxAttempts, 5), 1)
	o.MaxElapsed = cmp.Or(o.MaxElapsed, 30*time.Second)
	o.BaseDelay = cmp.Or(o.BaseDelay, 100*time.Millisecond)
	o.MaxDelay = cmp.Or(o.MaxDelay, 5*time.Second)
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts ...grpc.CallOption) error {
		if o.Methods != nil && !o.Methods(method) {
			return invoker(ctx, method, req, reply, cc, callOpts...)
		}
		if md, _ := metadata.FromOutgoingContext(ctx); len(md.Get(MetadataKey)) == 0 {
			ctx = metadata.AppendToOutgoingContext(ctx, MetadataKey, uuid.NewString())
		}
		ctx, cancel := context.WithTimeout(ctx, o.MaxElapsed)
		defer cancel()
		var err error
		for attempt := 1; ; attempt++ {
			err = o.attempt(ctx, method, req, reply, cc, invoker, callOpts)
			if err == nil || attempt >= o.MaxAttempts || !retryable(ctx, err) {
				return err
			}
			if !sleep(ctx, o.wait(attempt, err)) {
				return err // the next wait would outlast the call's deadline
			}
		}
	}
}

func (o *ClientOptions) attempt(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, callOpts []grpc.CallOption) error {
	if o.PerAttempt > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.PerAttempt)
		defer cancel()
	}
	return invoker(ctx, method, req, reply, cc, callOpts...)
}

// retryable reports whether err may be retried with the same key, given
// that the logical call's context ctx is still live.
func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.Aborted, codes.DeadlineExceeded:
		return true
	}
	return false
}

// wait is the backoff after attempt n (1-based) failed with err.
func (o *ClientOptions) wait(n int, err error) time.Duration {
	d := o.BaseDelay << min(n-1, 30)
	if d <= 0 || d > o.MaxDelay {
		d = o.MaxDelay
	}
	d = d/2 + rand.N(d/2+1)
	if hint := retryHint(err); hint > d {
		d = min(hint, o.MaxDelay)
	}
	return d
}

// retryHint is the RetryInfo delay in err's status, or 0.
func retryHint(err error) time.Duration {
	for _, det := range status.Convert(err).Details() {
		if ri, ok := det.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

// sleep waits d or until ctx ends; it reports whether the wait completed.
// A wait that would outlast ctx's deadline is not started.
func sleep(ctx context.Context, d time.Duration) bool {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
