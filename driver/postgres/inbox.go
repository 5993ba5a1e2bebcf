package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemdev/idem/driver"
)

// InboxRecord inserts the message's row or reads the one already there. If
// another transaction has inserted the same message and not yet ended, the
// insert waits for it; the read is a second statement so that, at READ
// COMMITTED, it sees what that transaction committed.
func (d *Driver) InboxRecord(ctx context.Context, q driver.Executor, source, id, hash string) (bool, string, error) {
	q = d.own(q)
	n, err := q.Exec(ctx, clockCTE+`INSERT INTO idem_inbox (source, message_id, payload_hash, received_at)
	SELECT $2, $3, $4, c.now FROM c ON CONFLICT (source, message_id) DO NOTHING`, d.clock(), source, id, hash)
	if err != nil {
		return false, "", fmt.Errorf("postgres: inbox record: %w", err)
	}
	if n == 1 {
		return false, hash, nil
	}
	var stored string
	err = q.QueryRow(ctx, `SELECT payload_hash FROM idem_inbox WHERE source = $1 AND message_id = $2`, source, id).Scan(&stored)
	if errors.Is(err, sql.ErrNoRows) {
		return false, "", driver.ErrConflict // pruned in between, or invisible above READ COMMITTED
	}
	if err != nil {
		return false, "", fmt.Errorf("postgres: inbox read: %w", err)
	}
	return true, stored, nil
}

// InboxPrune deletes records received at least olderThan ago, oldest
// first: bounded by clockNow and read in index order, the scan reads only
// the rows it deletes whatever the statistics say (see pruneSQL).
func (d *Driver) InboxPrune(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	n, err := d.ex.Exec(ctx, inboxPruneSQL, d.clock(), olderThan.Milliseconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("postgres: inbox prune: %w", err)
	}
	return int(n), nil
}

// inboxPruneSQL deletes at most $3 inbox records received at least $2 ms
// ago, by the row addresses it picked and locked (as pruneJobsSQL deletes
// by id).
const inboxPruneSQL = `DELETE FROM idem_inbox WHERE ctid = ANY(ARRAY(
	SELECT ctid FROM idem_inbox WHERE received_at <= ` + clockNow + ` - $2` + msInterval + `
	ORDER BY received_at LIMIT $3 FOR UPDATE OF idem_inbox SKIP LOCKED))`
