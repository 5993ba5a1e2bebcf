package idemhttp

import (
	"mime"
	"testing"
)

// FuzzParseMediaType: the fast path for a bare type/subtype agrees with
// mime.ParseMediaType on every input.
func FuzzParseMediaType(f *testing.F) {
	for _, s := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON", "text/event-stream",
		"application/x-www-form-urlencoded", "a/b/c", "/json", "json/", "", " application/json", "application/merge-patch+json", "text/plain;", "x/y z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		want, _, err := mime.ParseMediaType(v)
		if err != nil {
			want = ""
		}
		if got := parseMediaType(v); got != want {
			t.Fatalf("parseMediaType(%q) = %q, mime.ParseMediaType says %q", v, got, want)
		}
	})
}
