package idemhttp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// ErrBodyNotReplayable is matched by the error Transport returns when an
// attempt needs a retry but the request's body cannot be sent again
// (Request.GetBody is nil). Nothing is retried: the first attempt may or
// may not have taken effect.
var ErrBodyNotReplayable = errors.New("idemhttp: request body cannot be replayed for a retry")

// Transport is the client half of the Idempotency-Key protocol: an
// http.RoundTripper that makes each guarded request one logical operation.
//
// For a request whose method is guarded (Methods; POST and PATCH by
// default) it sends an Idempotency-Key header, a new UUIDv4 unless the
// request already carries one, and retries with that same key:
//
//   - network errors (the connection was refused, reset or closed, before or
//     after the server answered: the outcome is unknown, and the key makes
//     the retry safe);
//   - 409 with Retry-After (idemhttp's request-in-flight: the first attempt
//     is still running);
//   - 429 and every 5xx (idemhttp releases the key for these by default, so
//     the retry is handled afresh; and an idemhttp 504 says the outcome is
//     unknown until the lease ends).
//
// Every other answer is final and returned as it is: 2xx, 3xx, 400, 422, a
// 409 without Retry-After (a parked key, or the application's own
// conflict), 410 and the rest of 4xx are never retried.
//
// Waits double from BaseDelay up to MaxDelay, each drawn at random from its
// upper half (jitter), and are raised to the server's Retry-After. At most
// MaxAttempts attempts are made, and no attempt or wait runs past
// MaxElapsed from the start (nor past the request's own context). When no
// retry is left, the last answer is returned: the last response (its body
// unread), or the last error.
//
// Retries resend the body through Request.GetBody, which http.NewRequest
// sets for *bytes.Buffer, *bytes.Reader and *strings.Reader bodies. A
// request with a body and no GetBody is sent once; if it needs a retry,
// RoundTrip returns an error matching ErrBodyNotReplayable instead.
//
// Requests with other methods pass to Base unchanged and are not retried.
// Transport never modifies the caller's request. The zero value is ready to
// use; set fields before the first request and do not change them after.
type Transport struct {
	// Base sends each attempt. Nil means http.DefaultTransport.
	Base http.RoundTripper
	// Methods are the guarded methods. Nil means POST and PATCH.
	Methods []string
	// MaxAttempts bounds the attempts of one request, the first included.
	// Zero means 5.
	MaxAttempts int
	// MaxElapsed bounds one request, from the first attempt until its
	// response body is closed: attempts, waits and reading the body. Zero
	// means 30 s.
	MaxElapsed time.Duration
	// BaseDelay is the wait after the first attempt; it doubles with each
	// attempt. Zero means 100 ms.
	BaseDelay time.Duration
	// MaxDelay caps one backoff wait. Zero means 5 s. A longer Retry-After
	// is honoured if it fits in MaxElapsed; otherwise the response carrying
	// it is returned.
	MaxDelay time.Duration
}

// RoundTrip sends req, and for a guarded method retries it as the
// Transport documentation says.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	methods := t.Methods
	if methods == nil {
		methods = []string{http.MethodPost, http.MethodPatch}
	}
	if !slices.Contains(methods, req.Method) {
		return base.RoundTrip(req)
	}
	key := req.Header.Get("Idempotency-Key")
	if key == "" {
		key = uuid.NewString()
	}
	maxAttempts := max(cmp.Or(t.MaxAttempts, 5), 1)
	ctx, cancel := context.WithTimeout(req.Context(), cmp.Or(t.MaxElapsed, 30*time.Second))
	replayable := req.Body == nil || req.Body == http.NoBody || req.GetBody != nil

	for attempt := 1; ; attempt++ {
		r := req.Clone(ctx)
		r.Header.Set("Idempotency-Key", key)
		if attempt > 1 && req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				cancel()
				return nil, fmt.Errorf("idemhttp: %s %s: replaying the body for attempt %d: %w", req.Method, req.URL.Redacted(), attempt, err)
			}
			r.Body = body
		}
		resp, err := base.RoundTrip(r)
		hint, retry := retryable(resp, err)
		if !retry || attempt == maxAttempts || ctx.Err() != nil {
			return finalAnswer(resp, err, cancel)
		}
		wait := max(t.backoff(attempt), hint)
		if dl, _ := ctx.Deadline(); time.Until(dl) < wait {
			return finalAnswer(resp, err, cancel) // the wait would pass MaxElapsed
		}
		if !replayable {
			discard(resp)
			cancel()
			what := fmt.Sprintf("a network error (%v)", err)
			if err == nil {
				what = resp.Status
			}
			return nil, fmt.Errorf("%w: %s %s got %s, which needs a retry; set Request.GetBody (http.NewRequest does for in-memory bodies)",
				ErrBodyNotReplayable, req.Method, req.URL.Redacted(), what)
		}
		discard(resp)
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			cancel()
			if err == nil {
				err = fmt.Errorf("got %s", resp.Status)
			}
			return nil, fmt.Errorf("idemhttp: %s %s: %w after %d attempts (last: %v)", req.Method, req.URL.Redacted(), context.Cause(ctx), attempt, err)
		case <-timer.C:
		}
	}
}

// retryable reports whether an attempt's answer may be retried with the
// same key, and the server's Retry-After hint.
func retryable(resp *http.Response, err error) (hint time.Duration, retry bool) {
	if err != nil {
		return 0, !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
	}
	hint = retryAfter(resp.Header.Get("Retry-After"))
	switch {
	case resp.StatusCode == http.StatusConflict:
		return hint, resp.Header.Get("Retry-After") != ""
	case resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode >= 500:
		return hint, true
	}
	return 0, false
}

// retryAfter parses a Retry-After value: delay-seconds or an HTTP-date.
// Anything else is no hint.
func retryAfter(v string) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 32); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(time.Until(at), 0)
	}
	return 0
}

// backoff is the jittered exponential wait after attempt n (1-based).
func (t *Transport) backoff(n int) time.Duration {
	base := cmp.Or(t.BaseDelay, 100*time.Millisecond)
	limit := cmp.Or(t.MaxDelay, 5*time.Second)
	d := base << min(n-1, 30)
	if d <= 0 || d > limit {
		d = limit
	}
	return d/2 + rand.N(d/2+1)
}

// finalAnswer returns an attempt's answer to the caller. The request's
// context lives until the response body is closed, so that the deadline
// covers reading it too.
func finalAnswer(resp *http.Response, err error, cancel context.CancelFunc) (*http.Response, error) {
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

// cancelOnClose ends a request's context when its response body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

// Close closes the body, then ends the context.
func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// discard drains a little of a response that will not be returned, so its
// connection can be reused, and closes it.
func discard(resp *http.Response) {
	if resp == nil {
		return
	}
	io.CopyN(io.Discard, resp.Body, 64<<10)
	resp.Body.Close()
}
