package idem

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/idemtype"
)

// Sentinel errors. Match them with errors.Is; a *ConflictError carrying the
// existing record matches the one for its outcome.
var (
	// ErrLeaseLost means a fenced write (Complete, Fail, Release, Heartbeat)
	// changed nothing: the claim's lease ended or another holder took the
	// key with a newer token. The caller must not report success; its local
	// effects, if joined to the same transaction, must roll back.
	ErrLeaseLost = errors.New("idem: lease lost")
	// ErrInFlight means another holder has a live claim on the key.
	ErrInFlight = errors.New("idem: operation in flight")
	// ErrMismatch means the key was used with a different fingerprint.
	ErrMismatch = errors.New("idem: key reused with a different request")
	// ErrParked means the key's outcome is unknown and waits for an operator
	// or a reconciler; idem will not run it again on its own.
	ErrParked = errors.New("idem: operation parked")
	// ErrExpired means the key completed long enough ago that its result is
	// no longer kept, but its tombstone is: a late replay, detected instead
	// of run again.
	ErrExpired = errors.New("idem: key expired")
	// ErrFailed is returned by Do when the stored outcome is a permanent
	// failure (recorded by Fail or a Permanent error).
	ErrFailed = errors.New("idem: operation failed permanently")
	// ErrInvalid is matched by every *InputError.
	ErrInvalid = errors.New("idem: invalid input")
	// ErrOutcomeUnknown is matched by an error after which a write may or
	// may not have been applied: the database connection broke after the
	// statement or its COMMIT was sent (the server died, a failover, a
	// network cut). Retry with the same key: the retry replays the result
	// if the write happened, and takes the claim back after its lease if
	// not. Not every such error matches it (a driver cannot always tell):
	// any error without a sentinel may have been applied, as far as the
	// caller knows.
	ErrOutcomeUnknown = driver.ErrOutcomeUnknown
	// ErrVacuum is matched by the error of a Prune whose sweep ran to its
	// end but whose PruneOptions.Vacuum pass failed (the role may not
	// vacuum the table, or the pass was cut short): the records were
	// pruned, and the space waits for autovacuum.
	ErrVacuum = errors.New("idem: prune: the sweep is complete, its vacuum failed")
)

// InputError reports a bad argument. Nothing was written.
type InputError struct {
	Field  string
	Reason string
}

func (e *InputError) Error() string { return fmt.Sprintf("idem: %s %s", e.Field, e.Reason) }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InputError) Is(target error) bool { return target == ErrInvalid }

// ConflictError is returned where a claim could not be taken. It carries the
// existing record, and matches ErrInFlight, ErrMismatch, ErrParked or
// ErrExpired by its Outcome.
type ConflictError struct {
	Outcome Outcome
	Record  idemtype.Record

	hashKey bool // Options.HashKeysInLogs: the message names KeyHash(key)
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%v: scope %q key %s (state %s, attempt %d)", e.sentinel(), e.Record.Scope, keyName(e.Record.Key, e.hashKey), e.Record.State, e.Record.Attempt)
}

// keyName is how a key appears in an error message: quoted, or as
// KeyHash(key) under Options.HashKeysInLogs, since errors end up in logs.
func keyName(key string, hash bool) string {
	if hash {
		return KeyHash(key)
	}
	return strconv.Quote(key)
}

// keyName is keyName under the ledger's option.
func (l *Ledger) keyName(key string) string { return keyName(key, l.hashKeys) }

func (e *ConflictError) sentinel() error {
	switch e.Outcome {
	case InFlight:
		return ErrInFlight
	case Mismatch:
		return ErrMismatch
	case Parked:
		return ErrParked
	case expired:
		return ErrExpired
	}
	return errors.New("idem: conflict " + e.Outcome.String())
}

// Is matches the sentinel for the outcome.
func (e *ConflictError) Is(target error) bool { return target == e.sentinel() }

// permanent marks an error as not worth retrying.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Permanent wraps err so that Do records a permanent failure (stored and
// replayed) instead of releasing the key for a retry.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanent{err}
}

// IsPermanent reports whether err was wrapped by Permanent.
func IsPermanent(err error) bool {
	var p permanent
	return errors.As(err, &p)
}
