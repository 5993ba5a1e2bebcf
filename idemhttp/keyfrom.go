package idemhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// keyKind is where a request carries its key.
type keyKind int

const (
	keyHeader keyKind = iota + 1
	keyJSON
	keyForm
	// keyFingerprint: the Idempotency-Key header if the request has one,
	// else the request fingerprint itself.
	keyFingerprint
)

// KeyFromFingerprint is the Options.KeyFrom (and `idem serve --key-from`)
// value that derives a missing key from the work: a request without an
// Idempotency-Key header gets its request fingerprint (method, path, query,
// canonical body without Options.Exclude) as its key, so identical work
// within the retention is done once. A request with the header uses it.
const KeyFromFingerprint = "fingerprint"

// keySource is a parsed Options.KeyFrom.
type keySource struct {
	kind keyKind
	name string   // header or form field name; the pointer as given for JSON
	ptr  []string // unescaped JSON Pointer tokens
}

func parseKeyFrom(s string) (keySource, error) {
	if s == KeyFromFingerprint {
		return keySource{kind: keyFingerprint, name: http.CanonicalHeaderKey("Idempotency-Key")}, nil
	}
	kind, arg, ok := strings.Cut(s, ":")
	if !ok || arg == "" {
		return keySource{}, fmt.Errorf("%q: want header:NAME, json:/pointer, form:NAME or fingerprint", s)
	}
	switch kind {
	case "header":
		if strings.ContainsAny(arg, " \t\r\n:") {
			return keySource{}, fmt.Errorf("%q: bad header name", s)
		}
		return keySource{kind: keyHeader, name: http.CanonicalHeaderKey(arg)}, nil
	case "json":
		if !strings.HasPrefix(arg, "/") {
			return keySource{}, fmt.Errorf("%q: a JSON Pointer starts with /", s)
		}
		var toks []string
		for _, t := range strings.Split(arg[1:], "/") {
			if strings.Contains(strings.ReplaceAll(strings.ReplaceAll(t, "~0", ""), "~1", ""), "~") {
				return keySource{}, fmt.Errorf("%q: ~ must be followed by 0 or 1", s)
			}
			toks = append(toks, unescapePointerToken(t))
		}
		return keySource{kind: keyJSON, name: arg, ptr: toks}, nil
	case "form":
		return keySource{kind: keyForm, name: arg}, nil
	}
	return keySource{}, fmt.Errorf("%q: unknown source %q (want header, json, form or fingerprint)", s, kind)
}

func unescapePointerToken(t string) string {
	return strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
}

// needsBody reports whether finding the key means reading the body first.
func (k keySource) needsBody() bool { return k.kind == keyJSON || k.kind == keyForm }

// String is the source as configured.
func (k keySource) String() string {
	switch k.kind {
	case keyHeader:
		return "header " + k.name
	case keyJSON:
		return "JSON field " + k.name
	case keyFingerprint:
		return "header " + k.name + " (or, without it, the request fingerprint)"
	default:
		return "form field " + k.name
	}
}

// errNoKey means the request carries no key at all.
var errNoKey = errors.New("no key")

// fromHeader returns the key from the configured header. Two or more
// fields of the header are ambiguous and rejected.
func (k keySource) fromHeader(h http.Header) (string, error) {
	vals := h.Values(k.name)
	switch len(vals) {
	case 0:
		return "", errNoKey
	case 1:
		return ParseKey(vals[0])
	}
	return "", fmt.Errorf("%w: %d %s fields; send exactly one", ErrInvalidKey, len(vals), k.name)
}

// fromBody returns the key from a JSON or form body.
func (k keySource) fromBody(body []byte, form url.Values) (string, error) {
	if k.kind == keyForm {
		vals, ok := form[k.name]
		switch {
		case !ok:
			return "", errNoKey
		case len(vals) > 1:
			return "", fmt.Errorf("%w: form field %s given %d times", ErrInvalidKey, k.name, len(vals))
		}
		return vals[0], checkBodyKey(vals[0])
	}
	dec := json.NewDecoder(bytes.NewReader(bytes.TrimPrefix(body, []byte("\xef\xbb\xbf")))) // a byte order mark, as the fingerprint ignores it
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", fmt.Errorf("%w: the body is not JSON, so JSON field %s cannot be read: %v", errBadBody, k.name, err)
	}
	for _, t := range k.ptr {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[t]; !ok {
				return "", errNoKey
			}
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(x) || (len(t) > 1 && t[0] == '0') {
				return "", errNoKey
			}
			v = x[i]
		default:
			return "", errNoKey
		}
	}
	switch s := v.(type) {
	case string:
		return s, checkBodyKey(s)
	case nil:
		return "", errNoKey
	}
	return "", fmt.Errorf("%w: JSON field %s is a %T, not a string", ErrInvalidKey, k.name, v)
}
