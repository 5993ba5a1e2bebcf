package jobs

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemdev/idem/driver"
	"github.com/idemdev/idem/fingerprint"
	"github.com/idemdev/idem/idemtype"
)

// UniqueOpts makes an enqueue a no-op while an equal job exists (River's
// UniqueOpts). The job's unique key is built from EnqueueOpts.UniqueKey
// (or, if that is empty, the job's kind), then the arguments (ByArgs) and
// the period (ByPeriod); the database refuses a second job with the same
// key on the same queue (or, with AcrossQueues, on any queue), so racing
// producers on any number of hosts get one job. Keys are per queue by
// default, as River's ByQueue: true; AcrossQueues makes one key span every
// queue, as River's default (ByQueue: false).
//
// What a duplicate enqueue gets depends on OnDuplicate: the existing job
// with EnqueueResult.Duplicate true (DuplicateReturn, the default), or a
// *DuplicateError matching ErrDuplicate (DuplicateReject). Nothing is
// written either way.
type UniqueOpts struct {
	// ByArgs adds the arguments to the key, as the fingerprint of their
	// canonical JSON (RFC 8785): two jobs whose arguments differ only in
	// key order or number spelling are equal.
	ByArgs bool
	// ByPeriod, when positive, adds the period the job's run time falls in
	// to the key: RunAt (or now plus Delay) truncated to a multiple of
	// ByPeriod since the zero time (so an hour starts on the hour, UTC).
	// One job per period.
	ByPeriod time.Duration
	// ByState is the set of states in which the key holds. Empty means
	// every state: the key holds until the job is pruned (completed and
	// cancelled jobs after Config.Retention; dead jobs never). A job that
	// moves to a state outside the set loses its key for good, even if it
	// comes back to a state in the set (a retry of a running job whose set
	// is StatesPending does not hold the key again). StatesPending, {available},
	// allows one waiting job and any number of running ones.
	ByState []idemtype.JobState
	// AcrossQueues makes the key hold across every queue: an equal job on
	// any queue is a duplicate, and a duplicate enqueue gets that job (on
	// its own queue, not the one asked for). False keeps the key per queue
	// (River's ByQueue: true). Keys across queues and keys per queue are
	// apart: an equal job enqueued per queue is not a duplicate of one
	// enqueued across queues, nor the other way round.
	AcrossQueues bool
	// OnDuplicate says what a duplicate enqueue gets. Default
	// DuplicateReturn. DuplicateReject is for Enqueue and EnqueueTx; a
	// batch (EnqueueMany) reports duplicates per job, and refuses it.
	OnDuplicate DuplicatePolicy
}

// DuplicatePolicy is what a duplicate enqueue gets (UniqueOpts.OnDuplicate).
type DuplicatePolicy int

const (
	// DuplicateReturn returns the existing job, with EnqueueResult.Duplicate
	// true and no error.
	DuplicateReturn DuplicatePolicy = iota
	// DuplicateReject returns a *DuplicateError (errors.Is ErrDuplicate)
	// carrying the existing job.
	DuplicateReject
)

// StatesPending is the "pending only" set for UniqueOpts.ByState: the key
// holds while the job waits (due, scheduled or, before its first claim,
// waiting) and is released when a worker claims it.
var StatesPending = []idemtype.JobState{idemtype.JobAvailable}

// ErrDuplicate matches a *DuplicateError: an enqueue with
// UniqueOpts.OnDuplicate DuplicateReject found an equal job.
var ErrDuplicate = errors.New("jobs: duplicate job")

// DuplicateError is a rejected duplicate enqueue. It matches ErrDuplicate.
type DuplicateError struct {
	// Job is the existing job holding the unique key.
	Job *idemtype.JobRow
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("jobs: duplicate job: job %d (%s, queue %s) holds unique key %q", e.Job.ID, e.Job.State, e.Job.Queue, e.Job.UniqueKey)
}

// Is reports whether target is ErrDuplicate.
func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicate }

// uniqueKey builds the job's unique key and state set from o. args is the
// job's encoded arguments; now is this host's clock.
func uniqueKey(o *EnqueueOpts, kind string, args []byte, now time.Time) (key string, states int, err error) {
	u := o.Unique
	if u == nil {
		return o.UniqueKey, 0, nil
	}
	if u.ByPeriod < 0 {
		return "", 0, inputErr("unique by period", "%v must not be negative", u.ByPeriod)
	}
	if u.OnDuplicate != DuplicateReturn && u.OnDuplicate != DuplicateReject {
		return "", 0, inputErr("unique on duplicate", "%d is not a DuplicatePolicy", u.OnDuplicate)
	}
	for _, s := range u.ByState {
		if !slices.Contains(idemtype.JobStates, s) {
			return "", 0, inputErr("unique by state", "%q is not a job state", s)
		}
	}
	var b strings.Builder
	if o.UniqueKey != "" {
		b.WriteString(o.UniqueKey)
	} else {
		b.WriteString("kind:" + kind)
	}
	if u.ByArgs {
		sum, err := fingerprint.Sum(args)
		if err != nil {
			return "", 0, inputErr("args", "not canonical JSON for UniqueOpts.ByArgs: %v", err)
		}
		sum = strings.TrimPrefix(sum, fingerprint.Scheme+":")
		b.WriteString("/args:" + sum[:32])
	}
	if u.ByPeriod > 0 {
		at := now.Add(o.Delay)
		if !o.RunAt.IsZero() {
			at = o.RunAt
		}
		b.WriteString("/period:" + at.Truncate(u.ByPeriod).UTC().Format(time.RFC3339Nano))
	}
	return b.String(), driver.JobStateBits(u.ByState), nil
}

// acrossQueues reports whether o asks for a key that holds across queues.
func acrossQueues(o *EnqueueOpts) bool {
	return o.Unique != nil && o.Unique.AcrossQueues
}

// rejects reports whether o asks for a duplicate to be an error.
func rejects(o *EnqueueOpts) bool {
	return o != nil && o.Unique != nil && o.Unique.OnDuplicate == DuplicateReject
}
