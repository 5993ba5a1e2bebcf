//go:build goexperiment.jsonv2

package fingerprint

import (
	"bytes"
	"encoding/json/jsontext"
	"testing"
)

// FuzzJSONText cross-checks Canonicalize against the standard library's
// own RFC 8785 implementation, jsontext.Value.Canonicalize, which Go 1.26
// builds only with GOEXPERIMENT=jsonv2:
//
//	GOEXPERIMENT=jsonv2 go test -run=^$ -fuzz=FuzzJSONText ./fingerprint/
//
// The two must reject the same inputs, and agree byte for byte except on
// numbers RFC 8785 rounds (jsontext writes the nearest float64, beyond the
// float64 range ±MaxFloat64), which Canonicalize keeps exact: there the
// outputs must have the same structure, ours denoting the input's values.
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
		case err == nil && !bytes.Equal(ours, theirs) && !bytes.Equal(mustCanonicalize(t, theirs), theirs):
			// jsontext's output holds only float64 forms, which we keep.
			t.Fatalf("outputs differ, and we change jsontext's:\n    ours %s\njsontext %s", ours, theirs)
		case err == nil && !bytes.Equal(ours, theirs) && !sameMeaning(t, in, ours):
			t.Fatalf("outputs differ and ours changed the meaning:\n    ours %s\njsontext %s", ours, theirs)
		case err != nil && theirErr == nil:
			t.Fatalf("we reject (%v), jsontext accepts: %s", err, theirs)
		}
	})
}

func mustCanonicalize(t *testing.T, in []byte) []byte {
	t.Helper()
	out, err := Canonicalize(in)
	if err != nil {
		t.Fatalf("Canonicalize(%s): %v", in, err)
	}
	return out
}
