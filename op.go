package idem

import (
	"fmt"
	"time"

	"github.com/idemdev/idem/internal/printable"
)

// Input bounds. Every input is checked before any database access.
const (
	MaxKeyLen         = 255 // bytes
	MaxScopeLen       = 255 // bytes
	MaxFingerprintLen = 255 // bytes
	minLease          = time.Millisecond
	maxLease          = 7 * 24 * time.Hour
	minRetention      = time.Millisecond
	maxRetention      = 10 * 366 * 24 * time.Hour
)

// Op names one logical operation: a Key inside a Scope, with the
// Fingerprint of the request that must not change between retries.
type Op struct {
	// Scope is who owns the key (tenant, principal, endpoint). Keys never
	// match across scopes. May be empty. At most 255 bytes.
	Scope string
	// Key is the caller's stable name for the operation, made before the
	// first attempt and reused by every retry. 1 to 255 bytes of UTF-8
	// without control characters.
	Key string
	// Fingerprint identifies the request (see package fingerprint). A retry
	// with a different fingerprint gets Mismatch. An empty fingerprint matches
	// only an empty one, so an operation that never sets one is keyed by Key alone.
	Fingerprint string
	// Lease overrides the ledger's default lease; zero means the default,
	// negative is an error.
	Lease time.Duration
	// Retention overrides how long the completed record stays
	// authoritative; zero means the default, negative is an error.
	Retention time.Duration
	// Stale overrides the ledger's stale-claim policy for this operation.
	// The zero value means the ledger's policy.
	Stale StalePolicy
}

// withDefaults validates op and fills zero fields from the ledger.
func (l *Ledger) withDefaults(op Op) (Op, error) {
	if err := checkText("key", op.Key, 1, MaxKeyLen); err != nil {
		return op, err
	}
	if err := checkText("scope", op.Scope, 0, MaxScopeLen); err != nil {
		return op, err
	}
	if err := checkText("fingerprint", op.Fingerprint, 0, MaxFingerprintLen); err != nil {
		return op, err
	}
	if op.Lease == 0 {
		op.Lease = l.lease
	}
	if op.Retention == 0 {
		op.Retention = l.retention
	}
	if op.Stale == 0 {
		op.Stale = l.stale
	}
	if err := checkDuration("lease", op.Lease, minLease, maxLease); err != nil {
		return op, err
	}
	if err := checkDuration("retention", op.Retention, minRetention, maxRetention); err != nil {
		return op, err
	}
	if op.Stale == StaleReconcile && l.reconcile == nil {
		return op, &InputError{Field: "stale", Reason: "policy StaleReconcile needs Options.Reconciler"}
	}
	return op, nil
}

func checkText(field, s string, minLen, maxLen int) error {
	if err := printable.Check(s, minLen, maxLen); err != nil {
		return &InputError{Field: field, Reason: err.Error()}
	}
	return nil
}

func checkDuration(field string, d, lo, hi time.Duration) error {
	if d < lo || d > hi {
		return &InputError{Field: field, Reason: fmt.Sprintf("%v is outside [%v, %v]", d, lo, hi)}
	}
	return nil
}
