package gateway

import (
	"strings"
	"testing"
)

// FuzzLinkTargets: with the identity, a Link value comes back as it was;
// with a function that marks targets, each target it is given lies
// between < and >, and nothing but the marks changes.
func FuzzLinkTargets(f *testing.F) {
	f.Add(`<http://10.0.0.5:9000/items?page=2>; rel="next", <https://docs.example/x>; rel="help"`)
	f.Add(`<`)
	f.Add(`>; <>`)
	f.Add(`</a>; title="x<y", </b>`)
	f.Fuzz(func(t *testing.T, v string) {
		if got := linkTargets(v, func(s string) string { return s }); got != v {
			t.Fatalf("identity: %q -> %q", v, got)
		}
		calls := 0
		marked := linkTargets(v, func(s string) string {
			if strings.ContainsRune(s, '>') {
				t.Fatalf("target %q of %q holds a >", s, v)
			}
			calls++
			return "\x00" + s
		})
		if len(marked) != len(v)+calls || strings.ReplaceAll(marked, "\x00", "") != strings.ReplaceAll(v, "\x00", "") {
			t.Fatalf("marked %q -> %q (%d targets)", v, marked, calls)
		}
	})
}
