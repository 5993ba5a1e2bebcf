package idemtype

import "time"

// JobQueue is a queue's shared state, as stored: whether it is paused.
type JobQueue struct {
	Name string
	// Paused reports that no claim takes the queue's jobs.
	Paused bool
	// PausedAt is when the queue was paused; zero when it is not.
	PausedAt time.Time
	// UpdatedAt is when it was last paused or resumed.
	UpdatedAt time.Time
}
