package idemhttp

import (
	"errors"
	"fmt"
	"strings"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/internal/printable"
)

// ErrInvalidKey is matched by every error ParseKey returns.
var ErrInvalidKey = errors.New("invalid idempotency key")

// ParseKey parses an Idempotency-Key field value and returns the key.
//
// The IETF draft defines the field as a Structured Field string (RFC 8941
// §3.3.3): "abc", with \" and \\ as the only escapes. Many clients send the
// key bare, so a value that does not start with a quote is taken as it is,
// provided it is visible ASCII without '"', '\\' or ','. Both spellings of
// one key are the same key: "abc" and abc match.
//
// Leading and trailing spaces and tabs are ignored. The key must be 1 to 255
// characters of printable ASCII (space included when quoted); parameters
// after a quoted string ("abc";p=1) are not accepted. Every error matches
// ErrInvalidKey and says what was wrong.
func ParseKey(v string) (string, error) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return "", keyError("is empty")
	}
	if len(v) > 2*idem.MaxKeyLen+2 {
		return "", keyError(fmt.Sprintf("is %d bytes, longer than %d", len(v), idem.MaxKeyLen))
	}
	var key string
	if v[0] == '"' {
		k, err := parseSFString(v)
		if err != nil {
			return "", err
		}
		key = k
	} else {
		for i := 0; i < len(v); i++ {
			switch c := v[i]; {
			case c == '"' || c == '\\' || c == ',':
				return "", keyError(fmt.Sprintf("has %q at byte %d (quote the key as a structured-field string)", c, i))
			case c <= ' ' || c >= 0x7f:
				return "", keyError(fmt.Sprintf("has a non-printable or non-ASCII byte 0x%02x at byte %d", c, i))
			}
		}
		key = v
	}
	if key == "" {
		return "", keyError("is empty")
	}
	if len(key) > idem.MaxKeyLen {
		return "", keyError(fmt.Sprintf("is %d characters, longer than %d", len(key), idem.MaxKeyLen))
	}
	return key, nil
}

// parseSFString parses an RFC 8941 sf-string that makes up all of v.
func parseSFString(v string) (string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", keyError(fmt.Sprintf("is a malformed structured-field string: bad escape at byte %d", i-1))
			}
			b.WriteByte(v[i])
		case c == '"':
			if i != len(v)-1 {
				return "", keyError(fmt.Sprintf("is a malformed structured-field string: %q follows the closing quote", v[i+1:]))
			}
			return b.String(), nil
		case c < ' ' || c >= 0x7f:
			return "", keyError(fmt.Sprintf("has a non-printable or non-ASCII byte 0x%02x at byte %d", c, i))
		default:
			b.WriteByte(c)
		}
	}
	return "", keyError("is a malformed structured-field string: no closing quote")
}

// checkBodyKey checks a key taken from a request body (JSON or form): 1 to
// 255 bytes of UTF-8 without control characters, the ledger's own rule.
func checkBodyKey(k string) error {
	if err := printable.Check(k, 1, idem.MaxKeyLen); err != nil {
		return keyError(err.Error())
	}
	return nil
}

func keyError(reason string) error { return fmt.Errorf("%w: key %s", ErrInvalidKey, reason) }
