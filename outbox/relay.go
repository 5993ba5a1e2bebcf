package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/idemdev/idem/internal/crashpoint"
	"github.com/idemdev/idem/jobs"
)

// maxAnswer bounds how much of the receiver's answer is read and recorded.
const maxAnswer = 4 << 10

// relay delivers one message or chunk per job.
type relay struct {
	o       *Outbox
	timeout time.Duration
}

// Outcome is what a receiver answered to a delivery, as recorded.
type Outcome struct {
	Status int    `json:"status"`
	Body   string `json:"body,omitempty"` // the first 4 KiB
}

// Work sends the request. A 2xx answer completes the job with the outcome
// recorded; a network error, 408, 409, 425, 429 or 5xx retries it (after
// Retry-After if the receiver sent one); any other answer dead-letters it.
// Each attempt carries the same Idempotency-Key.
func (r *relay) Work(ctx context.Context, j *jobs.Job[delivery]) error {
	if j.Attempt > 1 && isChunk(j.Args.Key) {
		r.o.metrics.ChunkRetry(face)
	}
	err := r.deliver(ctx, j)
	r.observe(ctx, j, err)
	return err
}

func (r *relay) deliver(ctx context.Context, j *jobs.Job[delivery]) error {
	d := j.Args
	if r.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.timeout)
		defer cancel()
	}
	if r.o.pub != nil {
		return r.publish(ctx, j)
	}
	req, err := http.NewRequestWithContext(ctx, d.Method, d.URL, bytes.NewReader(d.Body))
	if err != nil {
		return jobs.Permanent(fmt.Errorf("outbox: build request for %s: %w", d.Key, err))
	}
	for k, vs := range d.Header {
		req.Header[k] = vs
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Idempotency-Key", d.Key)
	resp, err := r.o.client.Do(req)
	if err != nil {
		// The request may or may not have arrived; the retry carries the
		// same key, so a key-honouring receiver applies it once.
		return fmt.Errorf("outbox: deliver %s: %w", d.Key, err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	out := Outcome{Status: resp.StatusCode, Body: string(body)}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		crashpoint.Hit(crashpoint.AfterDelivery)
		b, _ := json.Marshal(out)
		j.SetResult(b)
		return nil
	}
	err = fmt.Errorf("outbox: deliver %s: HTTP %d: %.200s", d.Key, resp.StatusCode, strings.TrimSpace(string(body)))
	switch resp.StatusCode {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests:
	default:
		if resp.StatusCode < 500 {
			return jobs.Permanent(err)
		}
	}
	if after, ok := retryAfter(resp.Header.Get("Retry-After")); ok {
		return jobs.RetryAfter(after, err)
	}
	return err
}

// publish hands the delivery to the configured Publisher.
func (r *relay) publish(ctx context.Context, j *jobs.Job[delivery]) error {
	d := j.Args
	if err := r.o.pub.Publish(ctx, Publication{Key: d.Key, URL: d.URL, Header: d.Header, Body: d.Body}); err != nil {
		return fmt.Errorf("outbox: publish %s: %w", d.Key, err)
	}
	crashpoint.Hit(crashpoint.AfterDelivery)
	return nil
}

// retryAfter parses a Retry-After header: seconds or an HTTP date, capped
// at a day.
func retryAfter(v string) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return min(time.Duration(s)*time.Second, 24*time.Hour), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return min(max(time.Until(t), 0), 24*time.Hour), true
	}
	return 0, false
}
