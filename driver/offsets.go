package driver

import (
	"context"
	"fmt"
)

// Offsets is an optional interface for stream consumers that keep their
// position next to their effects (package broker/kafka): one row per
// (group, topic, partition) holding the next offset to consume. Writing
// the position in the same transaction as the effect is what lets a
// consumer resume after a crash without losing or repeating an effect.
// Both drivers in this module implement it.
type Offsets interface {
	// OffsetStore sets the next offset of (group, topic, partition) inside
	// the caller's transaction (or on its own with Shared). It never moves
	// a stored offset back: a smaller next is a no-op, so a consumer that
	// lost its partition cannot undo the progress of the one that took it.
	OffsetStore(ctx context.Context, ex Executor, group, topic string, partition int32, next int64) error
	// OffsetsLoad returns the stored next offsets of group for the given
	// topics, by topic and partition. Partitions never stored are absent.
	OffsetsLoad(ctx context.Context, group string, topics []string) (map[string]map[int32]int64, error)
}

// CollectOffsets reads (topic, partition, next_offset) rows into out, for
// drivers implementing OffsetsLoad, and closes rows.
func CollectOffsets(rows Rows, out map[string]map[int32]int64) (map[string]map[int32]int64, error) {
	type row struct {
		topic     string
		partition int32
		next      int64
	}
	rs, err := ScanAll(rows, func(r Row) (row, error) {
		var x row
		err := r.Scan(&x.topic, &x.partition, &x.next)
		return x, err
	})
	if err != nil {
		return nil, fmt.Errorf("offsets load: %w", err)
	}
	for _, x := range rs {
		if out[x.topic] == nil {
			out[x.topic] = map[int32]int64{}
		}
		out[x.topic][x.partition] = x.next
	}
	return out, nil
}
