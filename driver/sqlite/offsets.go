package sqlite

import (
	"context"
	"fmt"
	"strings"

	"github.com/idemdev/idem/driver"
)

// OffsetStore upserts the next offset, never moving it back.
func (d *Driver) OffsetStore(ctx context.Context, q driver.Executor, group, topic string, partition int32, next int64) error {
	q = d.onWriter(q)
	if _, err := q.Exec(ctx, `INSERT INTO idem_kafka_offsets (group_id, topic, partition, next_offset, updated_at)
	VALUES (?, ?, ?, ?, ?) ON CONFLICT (group_id, topic, partition) DO UPDATE
	SET next_offset = excluded.next_offset, updated_at = excluded.updated_at
	WHERE excluded.next_offset > idem_kafka_offsets.next_offset`, group, topic, partition, next, d.nowMS()); err != nil {
		return fmt.Errorf("sqlite: offset store: %w", err)
	}
	return nil
}

// OffsetsLoad reads the group's stored offsets for topics.
func (d *Driver) OffsetsLoad(ctx context.Context, group string, topics []string) (map[string]map[int32]int64, error) {
	out := map[string]map[int32]int64{}
	if len(topics) == 0 {
		return out, nil
	}
	args := []any{group}
	for _, t := range topics {
		args = append(args, t)
	}
	rows, err := d.r.Query(ctx, `SELECT topic, partition, next_offset FROM idem_kafka_offsets
	WHERE group_id = ? AND topic IN (?`+strings.Repeat(", ?", len(topics)-1)+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: offsets load: %w", err)
	}
	return driver.CollectOffsets(rows, out)
}
