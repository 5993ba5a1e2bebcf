package driver

import (
	"context"
	"time"
)

// Inbox is what a database implements for exactly-once consumption: one row
// per (source, message id) with the payload's hash.
type Inbox interface {
	// InboxRecord inserts (source, id, hash) inside the caller's
	// transaction, or finds the row already there. dup reports the latter,
	// with the hash stored by the first delivery. On PostgreSQL a second
	// transaction recording the same message waits for the first to end.
	InboxRecord(ctx context.Context, ex Executor, source, id, hash string) (dup bool, storedHash string, err error)
	// InboxPrune deletes up to limit records received at least olderThan
	// ago, and returns how many it deleted.
	InboxPrune(ctx context.Context, olderThan time.Duration, limit int) (int, error)
}
