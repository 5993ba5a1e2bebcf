package idem

// Outcome is what a claim found.
type Outcome int

// Claim outcomes. Acquired and Reclaimed hand the caller the claim and a
// fencing token; the others do not.
const (
	// Acquired: the key was new (or released); you own it.
	Acquired Outcome = iota + 1
	// Reclaimed: a claim whose lease ended is now yours, with a newer token.
	// The previous holder may have done part of the work: pass the same key
	// downstream so it can deduplicate.
	Reclaimed
	// Replay: the operation finished; Claim.Result holds what it stored.
	Replay
	// InFlight: another holder has a live lease. Back off and retry.
	InFlight
	// Mismatch: the key was used with a different fingerprint.
	Mismatch
	// Parked: the outcome is unknown and waits for an operator.
	Parked
	// expired: the key finished and its retention ended; its tombstone
	// remains. Claim reports it as an ErrExpired error, not as an outcome.
	expired
)

var outcomeNames = [...]string{"", "acquired", "reclaimed", "replay", "in_flight", "mismatch", "parked", "expired"}

// String returns the outcome's name as used in logs and metrics.
func (o Outcome) String() string {
	if o > 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// Held reports whether the outcome gives the caller the claim.
func (o Outcome) Held() bool { return o == Acquired || o == Reclaimed }
