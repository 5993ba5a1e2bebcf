package idem

// Result is what a completed operation stored: a status (an HTTP status, or
// any small code), opaque metadata (the HTTP layer keeps headers there) and
// the body. Replayed is set by idem on results it returns from the ledger
// rather than from the caller's function; Complete ignores it.
type Result struct {
	Status   int
	Meta     []byte
	Body     []byte
	Replayed bool
}
