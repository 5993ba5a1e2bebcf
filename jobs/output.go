package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// MaxOutputBytes bounds the encoded output of one job.
const MaxOutputBytes = 1 << 20

// execKey carries the execution in a job's context, for RecordOutput.
type execKey struct{}

// RecordOutput records v, encoded as JSON, as the output of the job whose
// context ctx is (the ctx given to Work). It is stored in the job's Result
// by the same fenced write, in the same transaction, that completes the
// job: when Work returns nil, or inside CompleteTx's transaction (so call
// RecordOutput before CompleteTx). A worker that lost its lease records
// nothing, as it completes nothing; an attempt that fails or snoozes
// records nothing either. A later call replaces an earlier one. It
// returns an error outside a job, after CompleteTx, when v does not
// encode, or when the output is over MaxOutputBytes.
func RecordOutput(ctx context.Context, v any) error {
	ex, ok := ctx.Value(execKey{}).(*execution)
	if !ok {
		return errors.New("jobs: RecordOutput: ctx is not a job's context")
	}
	if ex.completedTx.Load() {
		return fmt.Errorf("jobs: RecordOutput: job %d was already completed by CompleteTx; record output before it", ex.rec.ID)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("jobs: RecordOutput: %w", err)
	}
	if len(b) > MaxOutputBytes {
		return fmt.Errorf("jobs: RecordOutput: output is %d bytes, more than %d", len(b), MaxOutputBytes)
	}
	ex.mu.Lock()
	ex.result = b
	ex.mu.Unlock()
	return nil
}

// maxMetadataBytes bounds EnqueueOpts.Metadata, compacted.
const maxMetadataBytes = 64 << 10

// checkMetadata validates EnqueueOpts.Metadata and PartitionKey, and
// returns the metadata compacted (nil if none).
func checkMetadata(meta json.RawMessage, partition string) ([]byte, error) {
	if partition != "" {
		if err := checkText("partition key", partition, maxUniqueKeyLen); err != nil {
			return nil, err
		}
	}
	if len(meta) == 0 {
		return nil, nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, meta); err != nil {
		return nil, inputErr("metadata", "is not JSON: %v", err)
	}
	b := buf.Bytes()
	if len(b) == 0 || b[0] != '{' {
		return nil, inputErr("metadata", "must be a JSON object")
	}
	if len(b) > maxMetadataBytes {
		return nil, inputErr("metadata", "is %d bytes, more than %d", len(b), maxMetadataBytes)
	}
	return b, nil
}
