package inbox

import (
	"cmp"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/internal/printable"
)

// Bounds on the names a message is recorded under.
const (
	MaxSourceLen = 255 // bytes
	MaxIDLen     = 255 // bytes
)

// Config configures an Inbox. A nil *Config means all defaults.
type Config struct {
	// Hash turns a payload into the string stored and compared on
	// redelivery. Default: hex SHA-256 of the bytes. Use a canonical form
	// (package fingerprint) when a redelivery may re-encode the payload.
	Hash func(payload []byte) string
	// Logger receives a line per refused mismatch. Default slog.Default().
	Logger *slog.Logger
}

// Inbox records consumed messages in the ledger's database.
type Inbox struct {
	drv  driver.Driver
	hash func([]byte) string
	log  *slog.Logger
}

// MismatchError is a message id seen before with a different payload. It
// matches idem.ErrMismatch. Nothing was written and fn did not run.
type MismatchError struct {
	Source, MessageID string
	StoredHash, Hash  string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("inbox: message %q of %q was consumed before with a different payload (hash %.12s…, now %.12s…)",
		e.MessageID, e.Source, e.StoredHash, e.Hash)
}

// Is matches idem.ErrMismatch.
func (e *MismatchError) Is(target error) bool { return target == idem.ErrMismatch }

// New makes an inbox on the ledger's database.
func New(l *idem.Ledger, cfg *Config) (*Inbox, error) {
	if l == nil {
		return nil, &idem.InputError{Field: "ledger", Reason: "must not be nil"}
	}
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	if c.Hash == nil {
		c.Hash = sha256Hex
	}
	return &Inbox{drv: l.Driver(), hash: c.Hash, log: cmp.Or(c.Logger, slog.Default())}, nil
}

func sha256Hex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// DB is a database/sql handle on the inbox's database (Ledger.DB), for the
// transactions passed to RecordTx; any transaction of the application's on
// the same database works too (see idem.Tx).
func (in *Inbox) DB() *sql.DB { return in.drv.DB() }

// maxTries bounds the record loop; a retry means the row was pruned
// between the insert and the read.
const maxTries = 3

// Process runs fn for a message seen for the first time, in one
// transaction with the record of (source, messageID) and the payload's
// hash; it reports duplicate=true, without running fn, for a message
// already consumed with the same payload. fn's error rolls everything back
// and is returned: the message is not recorded, and its redelivery runs fn
// again.
//
// Concurrent deliveries of one message do not both run fn: on PostgreSQL
// the second waits for the first's transaction and then sees a duplicate
// (or runs fn if the first rolled back); on SQLite transactions take turns
// on the single writer, so fn should be short.
//
// If the commit itself fails, the outcome is unknown; the redelivery finds
// out (duplicate, or fn runs).
func (in *Inbox) Process(ctx context.Context, source, messageID string, payload []byte, fn func(tx *sql.Tx) error) (duplicate bool, err error) {
	if fn == nil {
		return false, &idem.InputError{Field: "fn", Reason: "must not be nil"}
	}
	if err := checkNames(source, messageID); err != nil {
		return false, err
	}
	hash := in.hash(payload)
	for range maxTries {
		dup, err := in.process(ctx, source, messageID, hash, fn)
		if errors.Is(err, driver.ErrConflict) {
			continue
		}
		return dup, err
	}
	return false, fmt.Errorf("inbox: message %q of %q: record vanished %d times while being read", messageID, source, maxTries)
}

func (in *Inbox) process(ctx context.Context, source, id, hash string, fn func(*sql.Tx) error) (bool, error) {
	tx, end, err := in.drv.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("inbox: begin: %w", err)
	}
	defer end()
	defer tx.Rollback()
	dup, err := in.record(ctx, driver.SQL(tx), source, id, hash)
	if err != nil || dup {
		return dup, err
	}
	if err := fn(tx); err != nil {
		return false, err
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("inbox: commit message %q of %q: %w; the redelivery will tell: %w", id, source, idem.ErrOutcomeUnknown, err)
	}
	return false, nil
}

// RecordTx records the message inside the caller's transaction, for
// consumers that manage their own: duplicate=false means it is new and the
// caller applies its effect with tx before committing; duplicate=true means
// it was consumed before and the caller does nothing (and may roll back).
// A different payload under a known id returns a *MismatchError.
func (in *Inbox) RecordTx(ctx context.Context, tx idem.Tx, source, messageID string, payload []byte) (duplicate bool, err error) {
	if tx == nil {
		return false, &idem.InputError{Field: "tx", Reason: "must not be nil"}
	}
	ex, err := in.drv.Executor(tx)
	if err != nil {
		return false, &idem.InputError{Field: "tx", Reason: err.Error()}
	}
	if err := checkNames(source, messageID); err != nil {
		return false, err
	}
	dup, err := in.record(ctx, ex, source, messageID, in.hash(payload))
	if errors.Is(err, driver.ErrConflict) {
		return false, fmt.Errorf("inbox: message %q of %q: record vanished while being read; retry the transaction", messageID, source)
	}
	return dup, err
}

func (in *Inbox) record(ctx context.Context, ex driver.Executor, source, id, hash string) (bool, error) {
	dup, stored, err := in.drv.InboxRecord(ctx, ex, source, id, hash)
	if err != nil {
		if errors.Is(err, driver.ErrConflict) {
			return false, err
		}
		return false, fmt.Errorf("inbox: record message %q of %q: %w", id, source, err)
	}
	if dup && stored != hash {
		in.log.LogAttrs(ctx, slog.LevelWarn, "message redelivered with a different payload",
			slog.String("source", source), slog.String("message_id", id), slog.String("stored_hash", stored), slog.String("hash", hash))
		return true, &MismatchError{Source: source, MessageID: id, StoredHash: stored, Hash: hash}
	}
	return dup, nil
}

// Prune forgets messages recorded at least olderThan ago, in batches, and
// returns how many. A message redelivered after it was forgotten is
// processed again: keep records longer than the stream can redeliver
// (Kafka retention, SQS visibility plus redrive, a webhook sender's retry
// window).
func (in *Inbox) Prune(ctx context.Context, olderThan time.Duration) (int, error) {
	if olderThan <= 0 {
		return 0, &idem.InputError{Field: "older than", Reason: fmt.Sprintf("%v must be positive", olderThan)}
	}
	total := 0
	for {
		n, err := in.drv.InboxPrune(ctx, olderThan, 1000)
		total += n
		if err != nil || n < 1000 {
			return total, err
		}
	}
}

func checkNames(source, id string) error {
	if err := checkText("source", source, MaxSourceLen); err != nil {
		return err
	}
	return checkText("message id", id, MaxIDLen)
}

func checkText(field, s string, maxLen int) error {
	if err := printable.Check(s, 1, maxLen); err != nil {
		return &idem.InputError{Field: field, Reason: err.Error()}
	}
	return nil
}
