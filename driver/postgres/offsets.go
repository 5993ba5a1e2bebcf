package postgres

import (
	"context"
	"fmt"

	"github.com/idemdev/idem/driver"
)

// OffsetStore upserts the next offset, never moving it back.
func (d *Driver) OffsetStore(ctx context.Context, q driver.Executor, group, topic string, partition int32, next int64) error {
	q = d.own(q)
	if _, err := q.Exec(ctx, clockCTE+`INSERT INTO idem_kafka_offsets AS o (group_id, topic, partition, next_offset, updated_at)
	SELECT $2, $3, $4, $5, c.now FROM c ON CONFLICT (group_id, topic, partition) DO UPDATE
	SET next_offset = excluded.next_offset, updated_at = excluded.updated_at
	WHERE excluded.next_offset > o.next_offset`, d.clock(), group, topic, partition, next); err != nil {
		return fmt.Errorf("postgres: offset store: %w", err)
	}
	return nil
}

// OffsetsLoad reads the group's stored offsets for topics.
func (d *Driver) OffsetsLoad(ctx context.Context, group string, topics []string) (map[string]map[int32]int64, error) {
	rows, err := d.ex.Query(ctx, `SELECT topic, partition, next_offset FROM idem_kafka_offsets
	WHERE group_id = $1 AND topic = ANY($2)`, group, topics)
	if err != nil {
		return nil, fmt.Errorf("postgres: offsets load: %w", err)
	}
	return driver.CollectOffsets(rows, map[string]map[int32]int64{})
}
