package idemhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/fingerprint"
	"github.com/idemdev/idem/internal/printable"
)

// prepared is what the ledger needs from a guarded request, gathered
// without any database access.
type prepared struct {
	scope       string
	key         string
	fingerprint string
}

// prepare reads the key, the body (at most MaxBody+1 bytes), the scope and
// the fingerprint of r. It returns nil and no problem when r carries no key
// and none is required: the request then passes through unguarded, its body
// (if read) restored. A problem is answered before anything is claimed.
//
// secret gives the database's scope secret (see ScopeHMAC); it is asked
// only for a request that carries a key. The result is written to into,
// the caller's (on its stack), and returned.
func (c *config) prepare(r *http.Request, secret func() ([]byte, error), into *prepared) (*prepared, *Problem) {
	var key string
	derive := false // the key is the fingerprint (KeyFromFingerprint)
	if !c.key.needsBody() {
		k, err := c.key.fromHeader(r.Header)
		if errors.Is(err, errNoKey) && c.key.kind == keyFingerprint {
			derive = true
			err = nil
		}
		if errors.Is(err, errNoKey) {
			return nil, c.missingKey()
		}
		if err != nil {
			return nil, badKey(err)
		}
		key = k
	}

	body, prob := c.readBody(r)
	if prob != nil {
		return nil, prob
	}
	// The body as sent goes to the handler; its content makes the
	// fingerprint and holds a key read from the body.
	content, coding, prob := c.content(r, body)
	if prob != nil {
		return nil, prob
	}
	mt := mediaType(r)
	form, fields, prob := c.forms(mt, content)
	if prob != nil {
		return nil, prob
	}
	if c.key.needsBody() {
		k, err := c.key.fromBody(content, fields)
		switch {
		case errors.Is(err, errNoKey):
			return nil, c.missingKey()
		case errors.Is(err, errBadBody):
			return nil, &Problem{Type: ProblemBodyInvalid, Title: "Malformed request body", Status: http.StatusBadRequest, Detail: err.Error()}
		case err != nil:
			return nil, badKey(err)
		}
		key = k
	}

	sk, err := secret()
	if err != nil {
		c.log.ErrorContext(r.Context(), "idemhttp: ledger unavailable; request not handled", "err", err)
		return nil, &Problem{Type: ProblemLedgerUnavailable, Title: "Idempotency ledger unavailable", Status: http.StatusServiceUnavailable,
			Detail: "The request was not handled. Retry with the same key.", RetryAfter: 1}
	}
	var scope string
	if c.scope == nil { // the default, ScopeAuthorization, without a request copy to carry the secret
		scope = scopeHMAC(sk, "authorization", r.Header.Get("Authorization"))
	} else {
		scope = c.scope(r.WithContext(context.WithValue(r.Context(), scopeSecretKey{}, sk)))
	}
	if scope == "" && c.anonymous == AnonymousRefuse {
		return nil, &Problem{Type: ProblemScopeMissing, Title: "No scope for the idempotency key", Status: http.StatusBadRequest,
			Detail: "This request carries an idempotency key but no credential that says whose key it is (by default the Authorization header), so its stored response could reach another caller; nothing was done. " +
				"Send Authorization, or ask the operator to scope keys by the header that identifies callers (idem serve --scope-header NAME; idemhttp Options.Scope) " +
				"or to share one scope among all callers without a credential (idem serve --anonymous-scope shared; Options.AnonymousScope AnonymousShared).",
			Help: c.docsURL}
	}
	if err := checkScope(scope); err != nil {
		return nil, &Problem{Type: ProblemScopeInvalid, Title: "Invalid scope", Status: http.StatusBadRequest, Detail: err.Error()}
	}
	fp, err := c.requestFingerprint(r, content, coding, mt, form)
	if err != nil {
		return nil, &Problem{Type: ProblemBodyInvalid, Title: "Malformed request body", Status: http.StatusBadRequest, Detail: err.Error()}
	}
	if derive {
		// Identical work is one operation. The derived key is passed on
		// like a client's, so the handler (the upstream) can deduplicate
		// on it too, and a redo after a crash carries the same key.
		key = fp
		r.Header.Set(c.key.name, key)
	}
	*into = prepared{scope: scope, key: key, fingerprint: fp}
	return into, nil
}

// content returns body without its content codings (see requestCoding),
// or, in a coding the middleware does not decode, body itself and the
// coding.
func (c *config) content(r *http.Request, body []byte) (content []byte, coding string, _ *Problem) {
	cs := requestCoding(r.Header)
	if len(cs) == 0 {
		return body, "", nil
	}
	plain, ok, err := decodeRequest(cs, body, c.maxBody)
	switch {
	case errors.Is(err, errDecodedTooLarge):
		return nil, "", &Problem{Type: ProblemBodyTooLarge, Title: "Request body too large", Status: http.StatusRequestEntityTooLarge,
			Detail: fmt.Sprintf("The body decodes to more than %d bytes; nothing was done.", c.maxBody)}
	case err != nil:
		return nil, "", &Problem{Type: ProblemBodyInvalid, Title: "Malformed request body", Status: http.StatusBadRequest, Detail: err.Error() + "; nothing was done."}
	case ok:
		return plain, "", nil
	case c.key.needsBody():
		return nil, "", &Problem{Type: ProblemBodyEncoding, Title: "Unsupported request body encoding", Status: http.StatusUnsupportedMediaType,
			Detail:         fmt.Sprintf("The key is read from %s, but the body's Content-Encoding (%s) is not one this server decodes; nothing was done.", c.key, strings.Join(cs, ", ")),
			AcceptEncoding: RequestCodings}
	}
	return body, strings.Join(cs, ", "), nil
}

// forms returns content parsed as a form, for the fingerprint (nil unless
// it is urlencoded), and the fields a key is read from under KeyFrom
// "form:NAME" (a multipart form's fields that are not files too).
func (c *config) forms(mt string, content []byte) (form, fields url.Values, _ *Problem) {
	bad := func(what string, err error) *Problem {
		return &Problem{Type: ProblemBodyInvalid, Title: "Malformed form body", Status: http.StatusBadRequest,
			Detail: fmt.Sprintf("The key is read from %s, but the %s: %v.", c.key, what, err)}
	}
	switch {
	case mt == multipartType && c.key.kind == keyForm:
		f, ok := fingerprint.MultipartFields(content)
		if !ok {
			return nil, nil, bad("multipart body is not a form", errors.New("its parts do not parse"))
		}
		return nil, f, nil
	case mt == formType || c.key.kind == keyForm:
		f, err := url.ParseQuery(string(content))
		if err != nil && c.key.kind == keyForm {
			return nil, nil, bad("body is not a form", err)
		}
		if err == nil {
			return f, f, nil
		}
	}
	return nil, nil, nil
}

// missingKey is nil (pass through) unless a key is required.
func (c *config) missingKey() *Problem {
	if !c.requireKey {
		return nil
	}
	return &Problem{Type: ProblemKeyMissing, Title: "Idempotency key required", Status: http.StatusBadRequest,
		Detail: fmt.Sprintf("This endpoint requires an idempotency key in the %s; see %s.", c.key, c.docsURL),
		Help:   c.docsURL}
}

func badKey(err error) *Problem {
	return &Problem{Type: ProblemKeyInvalid, Title: "Invalid idempotency key", Status: http.StatusBadRequest, Detail: err.Error() + "."}
}

// readBody reads the whole body, at most MaxBody+1 bytes of it, and puts
// it back on r (with GetBody, so a proxy may resend it).
func (c *config) readBody(r *http.Request) ([]byte, *Problem) {
	if r.ContentLength > c.maxBody {
		return nil, c.tooLarge()
	}
	var body []byte
	var held *heldBody
	if r.Body != nil && r.Body != http.NoBody {
		held = &heldBody{lim: io.LimitedReader{R: r.Body, N: c.maxBody + 1}}
		b, err := io.ReadAll(&held.lim)
		held.lim.R = nil // the client's body is not kept
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, &Problem{Type: ProblemBodyTimeout, Title: "Request body too slow", Status: http.StatusRequestTimeout,
				Detail: "The body did not arrive within the server's read timeout; nothing was done."}
		}
		if err != nil {
			return nil, &Problem{Type: ProblemBodyInvalid, Title: "Unreadable request body", Status: http.StatusBadRequest, Detail: err.Error()}
		}
		if int64(len(b)) > c.maxBody {
			return nil, c.tooLarge()
		}
		body = b
	}
	r.ContentLength = int64(len(body))
	r.TransferEncoding = nil
	if len(body) == 0 {
		r.Body, r.GetBody = http.NoBody, nil
		return body, nil
	}
	held.body = body
	held.Reset(body)
	r.Body, r.GetBody = held, held.reopen
	return body, nil
}

// heldBody is a request body read into memory and put back: the body
// itself (a reader that closes as a no-op), the limited reader it was read
// through, and GetBody's copies, in one allocation.
type heldBody struct {
	bytes.Reader
	lim  io.LimitedReader
	body []byte
}

// Close does nothing: the bytes are the garbage collector's.
func (*heldBody) Close() error { return nil }

// reopen is GetBody: a fresh reader of the same bytes.
func (h *heldBody) reopen() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(h.body)), nil }

func (c *config) tooLarge() *Problem {
	return &Problem{Type: ProblemBodyTooLarge, Title: "Request body too large", Status: http.StatusRequestEntityTooLarge,
		Detail: fmt.Sprintf("The body is larger than %d bytes; nothing was done.", c.maxBody)}
}

func checkScope(s string) error {
	if err := printable.Check(s, 0, idem.MaxScopeLen); err != nil {
		return fmt.Errorf("the scope %w", err)
	}
	return nil
}
