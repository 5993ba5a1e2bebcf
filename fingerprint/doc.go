// Package fingerprint computes the fingerprint of a request: a SHA-256 hash
// of its RFC 8785 (JSON Canonicalization Scheme, JCS) canonical form, after
// dropping the fields that do not change the result and, optionally,
// normalizing strings.
//
// Two requests have the same fingerprint exactly when their canonical forms
// are byte for byte equal. Key order, insignificant white space, number
// spelling (1.0, 1e0, 10e-1) and string escapes (\u00e9 or é) never change
// a fingerprint; a value, a key or an array order does.
//
// Fingerprints are stored next to idempotency keys and compared on every
// retry, so the canonical form is a persistent format: a change to the bytes
// Canonicalize produces for some input would make every stored fingerprint of
// such an input mismatch its retries. The tests pin the output.
//
// Parsing is strict and never repairs input: duplicate object keys, invalid
// UTF-8, lone UTF-16 surrogate escapes, numbers outside the finite float64
// range, nesting deeper than 10000 levels, trailing data and empty input are
// all rejected with a *SyntaxError that names the byte offset.
package fingerprint
