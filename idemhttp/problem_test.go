package idemhttp_test

import (
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/idemdev/idem/idemhttp"
)

// A problem document says its problem a second time as an OAuth 2.0 error
// response does ("error", "error_description"), for clients that tell an
// error by its body: the type's last segment, and the detail, or the
// title when there is none.
func TestProblemCarriesAnErrorMember(t *testing.T) {
	for _, p := range []idemhttp.Problem{
		{Type: idemhttp.ProblemKeyMismatch, Title: "Idempotency key reused", Status: 422, Detail: "This key was used for a different request."},
		{Type: idemhttp.ProblemInFlight, Title: "Request in flight", Status: 409, RetryAfter: 1},
	} {
		rec := httptest.NewRecorder()
		idemhttp.WriteProblem(rec, p)
		var doc map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
			t.Fatalf("%s: %v\n%s", p.Type, err, rec.Body)
		}
		slug := p.Type[len(idemhttp.ProblemBase):]
		desc := p.Detail
		if desc == "" {
			desc = p.Title
		}
		if doc["error"] != slug || doc["error_description"] != desc || doc["type"] != p.Type || doc["status"] != float64(p.Status) {
			t.Errorf("%s: got %s, want error %q and error_description %q besides type and status", p.Type, rec.Body, slug, desc)
		}
		if _, ok := doc["detail"]; ok != (p.Detail != "") {
			t.Errorf("%s: detail present %v, want %v: %s", p.Type, ok, p.Detail != "", rec.Body)
		}
		if rec.Code != p.Status || rec.Header().Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %q", p.Type, rec.Code, rec.Header().Get("Content-Type"))
		}
	}
}
