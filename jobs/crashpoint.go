package jobs

// Crash points compiled into the job path, armed for tests through
// IDEM_CRASHPOINT (see internal/crashpoint). The outbox relay adds
// crashpoint.AfterDelivery.
const (
	// CrashAfterClaim: a batch was claimed and committed; this job has not
	// started. Recovery: its lease ends, the next claim rescues it.
	CrashAfterClaim = "job-after-claim"
	// CrashBeforeCommit: CompleteTx wrote the completion in the handler's
	// transaction, which has not committed. Recovery: the transaction, the
	// effect in it and the completion vanish together; the job runs again.
	CrashBeforeCommit = "job-before-commit"
	// CrashAfterCommit: the handler returned nil (its CompleteTx committed);
	// the client has not yet confirmed it. Recovery: none needed.
	CrashAfterCommit = "job-after-commit"
)
