// Package fingerprint computes the fingerprint of a request: a SHA-256 hash
// of its RFC 8785 (JSON Canonicalization Scheme, JCS) canonical form, after
// dropping the fields that do not change the result and, optionally,
// normalizing strings.
//
// One deviation from RFC 8785 keeps requests of different value apart:
// RFC 8785 writes a number as the float64 nearest to it, so
// 9007199254740993 and 9007199254740992 (or 0.10000000000000001 and 0.1)
// would share a form. Here a number keeps RFC 8785's form only where that
// form denotes exactly the number's value; any other number is written as
// its exact decimal value in the same layout (9007199254740993, 1e+400).
// Numbers a JSON encoder printed from a float64 always keep RFC 8785's form.
// ExactNumbers lists the numbers of a document that deviate.
//
// Two requests have the same fingerprint exactly when their canonical forms
// are byte for byte equal. Key order, insignificant white space, number
// spelling (1.0, 1e0, 10e-1) and string escapes (\u00e9 or é) never change
// a fingerprint; a value, a key or an array order does.
//
// HTTP fingerprints a whole HTTP request (method, path, query and body) the
// way package idemhttp and the gateway do, so that a tool can explain their
// decisions.
//
// Fingerprints are stored next to idempotency keys and compared on every
// retry, so the canonical form is a persistent format: a change to the bytes
// Canonicalize produces for some input would make every stored fingerprint of
// such an input mismatch its retries. The tests pin the output.
//
// Parsing is strict and never repairs input: duplicate object keys, invalid
// UTF-8, lone UTF-16 surrogate escapes, nesting deeper than 10000 levels,
// trailing data and empty input are all rejected with a *SyntaxError that names the byte offset.
package fingerprint
