package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemdev/idem/driver"
)

// InboxRecord inserts the message's row or reads the one already there. In
// the caller's transaction, which on SQLite holds the only writer, the two
// steps cannot interleave with another recorder.
func (d *Driver) InboxRecord(ctx context.Context, q driver.Executor, source, id, hash string) (bool, string, error) {
	q = d.onWriter(q)
	n, err := q.Exec(ctx, `INSERT INTO idem_inbox (source, message_id, payload_hash, received_at)
	VALUES (?, ?, ?, ?) ON CONFLICT (source, message_id) DO NOTHING`, source, id, hash, d.nowMS())
	if err != nil {
		return false, "", fmt.Errorf("sqlite: inbox record: %w", err)
	}
	if n == 1 {
		return false, hash, nil
	}
	var stored string
	err = q.QueryRow(ctx, `SELECT payload_hash FROM idem_inbox WHERE source = ? AND message_id = ?`, source, id).Scan(&stored)
	if errors.Is(err, sql.ErrNoRows) {
		return false, "", driver.ErrConflict // pruned between the two steps
	}
	if err != nil {
		return false, "", fmt.Errorf("sqlite: inbox read: %w", err)
	}
	return true, stored, nil
}

// InboxPrune deletes records received at least olderThan ago.
func (d *Driver) InboxPrune(ctx context.Context, olderThan time.Duration, limit int) (int, error) {
	n, err := d.w.Exec(ctx, `DELETE FROM idem_inbox WHERE (source, message_id) IN (
	SELECT source, message_id FROM idem_inbox WHERE received_at <= ? LIMIT ? + 0)`, d.nowMS()-ms(olderThan), limit)
	if err != nil {
		return 0, fmt.Errorf("sqlite: inbox prune: %w", err)
	}
	return int(n), nil
}
