package fingerprint

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// Scheme names how a fingerprint of JSON was computed: SHA-256 of the RFC
// 8785 canonical form. It prefixes every fingerprint from Hash, Sum and Of,
// so a stored fingerprint says how to recompute it.
const Scheme = "jcs-sha256"

// RawScheme names a fingerprint of bytes that are not JSON: SHA-256 of the
// bytes as they are. It prefixes every fingerprint from Bytes.
const RawScheme = "raw-sha256"

// Hash returns the fingerprint of canonical, which should be the output of
// Canonicalize: Scheme, a colon and the lowercase hex SHA-256 of the bytes.
// Hash does not check that canonical is canonical.
func Hash(canonical []byte) string {
	return digest(Scheme, canonical)
}

// Sum returns Hash of the canonical form of data under opts.
func Sum(data []byte, opts ...Option) (string, error) {
	canonical, err := Canonicalize(data, opts...)
	if err != nil {
		return "", err
	}
	return Hash(canonical), nil
}

// Of encodes v with encoding/json and returns Sum of the result. A value
// encoding/json cannot encode (a channel, a NaN) is an error. Note that
// encoding/json itself replaces invalid UTF-8 in Go strings with U+FFFD, so
// Of, unlike Sum, cannot reject it.
func Of(v any, opts ...Option) (string, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("fingerprint: %w", err)
	}
	return Sum(data, opts...)
}

// Bytes returns the fingerprint of raw bytes that are not JSON (a form
// post, a file): RawScheme, a colon and the lowercase hex SHA-256 of b. A
// Bytes fingerprint never equals a Hash fingerprint, even of the same bytes.
func Bytes(b []byte) string {
	return digest(RawScheme, b)
}

func digest(scheme string, b []byte) string {
	return format(scheme, sha256.Sum256(b))
}

// format spells a fingerprint: scheme, a colon, the sum in lowercase hex,
// built on the stack so that the string is the only allocation.
func format(scheme string, sum [sha256.Size]byte) string {
	var buf [64 + 2*sha256.Size]byte
	return string(appendFormat(buf[:0], scheme, sum))
}

// appendFormat appends the fingerprint format spells.
func appendFormat(dst []byte, scheme string, sum [sha256.Size]byte) []byte {
	dst = append(append(dst, scheme...), ':')
	return hex.AppendEncode(dst, sum[:])
}
