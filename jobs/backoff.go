package jobs

import (
	"math/rand/v2"
	"time"
)

// DefaultBackoff waits 1s after the first failed attempt and doubles each
// time up to an hour, with ±25% jitter so that jobs that failed together
// do not retry together.
func DefaultBackoff(attempt int) time.Duration {
	d := min(time.Second<<min(max(attempt-1, 0), 12), time.Hour)
	return d - d/4 + rand.N(d/2+1)
}
