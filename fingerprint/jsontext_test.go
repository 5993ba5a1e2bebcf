//go:build goexperiment.jsonv2

package fingerprint

import (
	"bytes"
	"encoding/json/jsontext"
	"strings"
	"testing"
)

// FuzzJSONText cross-checks Canonicalize against the standard library's
// own RFC 8785 implementation, jsontext.Value.Canonicalize, which Go 1.26
// builds only with GOEXPERIMENT=jsonv2:
//
//	GOEXPERIMENT=jsonv2 go test -run=^$ -fuzz=FuzzJSONText ./fingerprint/
//
// The two must agree byte for byte, and reject the same inputs, except
// that jsontext rounds a number beyond the float64 range to ±MaxFloat64
// where Canonicalize refuses it.
func FuzzJSONText(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		ours, err := Canonicalize(in)
		theirs := jsontext.Value(bytes.Clone(in))
		theirErr := theirs.Canonicalize()
		switch {
		case err == nil && theirErr != nil:
			t.Fatalf("we accept (%s), jsontext rejects: %v", ours, theirErr)
		case err == nil && !bytes.Equal(ours, theirs):
			t.Fatalf("outputs differ:\n    ours %s\njsontext %s", ours, theirs)
		case err != nil && theirErr == nil && !strings.Contains(err.Error(), "not a finite float64"):
			t.Fatalf("we reject (%v), jsontext accepts: %s", err, theirs)
		}
	})
}
