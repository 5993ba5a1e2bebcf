package idemhttp

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/idemdev/idem/fingerprint"
)

// FingerprintScheme prefixes every request fingerprint the middleware
// stores. The fingerprint is the SHA-256 of
//
//	"idemhttp/v1\n" method "\n" escaped path "\n" raw query "\n" body fingerprint
//
// where the body fingerprint is "empty", a fingerprint.Sum of the JSON body
// (RFC 8785 canonical form, with Options.Exclude applied), "form-sha256:…"
// of a form body with its fields sorted, or fingerprint.Bytes of any other
// body. JSON that differs only in white space, key order or number
// spelling is the same request. Changing this format would make stored
// fingerprints mismatch their retries, so it is versioned.
const FingerprintScheme = "http-sha256"

// errBadBody marks a body that cannot be read or fingerprinted as declared.
var errBadBody = errors.New("bad request body")

// mediaType returns the request's media type, lower case, without
// parameters; "" when absent or unparsable.
func mediaType(r *http.Request) string {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return ""
	}
	return mt
}

func isJSONType(mt string) bool {
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

const formType = "application/x-www-form-urlencoded"

// requestFingerprint hashes what makes r the request it is: method, path,
// query and body.
func (c *config) requestFingerprint(r *http.Request, body []byte, mt string, form url.Values) (string, error) {
	bodyFP, err := c.bodyFingerprint(body, mt, form)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "idemhttp/v1\n%s\n%s\n%s\n%s", r.Method, r.URL.EscapedPath(), r.URL.RawQuery, bodyFP)
	return FingerprintScheme + ":" + hex.EncodeToString(h.Sum(nil)), nil
}

func (c *config) bodyFingerprint(body []byte, mt string, form url.Values) (string, error) {
	if len(body) == 0 {
		return "empty", nil
	}
	if isJSONType(mt) {
		fp, err := fingerprint.Sum(body, c.fpOpts...)
		if err != nil {
			return "", fmt.Errorf("%w: Content-Type is %s but the body is not JSON: %v", errBadBody, mt, err)
		}
		return fp, nil
	}
	// Clients (curl -d, for one) often send JSON labelled as a form or as
	// nothing; JSON is recognised by its shape, so white space and key
	// order still do not matter.
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) > 0 && (t[0] == '{' || t[0] == '[') {
		if fp, err := fingerprint.Sum(body, c.fpOpts...); err == nil {
			return fp, nil
		}
	}
	if form != nil {
		vals := url.Values{}
		for k, v := range form {
			if !c.formExclude[k] {
				vals[k] = v
			}
		}
		sum := sha256.Sum256([]byte(vals.Encode()))
		return "form-sha256:" + hex.EncodeToString(sum[:]), nil
	}
	return fingerprint.Bytes(body), nil
}
