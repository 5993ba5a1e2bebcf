package fingerprint

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"testing"
	"unicode/utf8"
)

// fuzzSeeds are inputs the fuzz targets start from.
var fuzzSeeds = []string{
	`{"b":[1.0,2e21,"\u00e9"],"a":-0}`,
	`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
	`{"\u20ac":1,"\r":2,"\ufb33":3,"1":4,"\ud83d\ude00":5,"\u0080":6,"\u00f6":7}`,
	`{"a":{"b":[{"c":" x  y "}]},"*":{"b":1}}`,
	`{"e\u0301":1,"é":2}`,
	`{"a":1,"a":2}`,
	`"\ud800"`,
	`"\udc00\ud800"`,
	"\"\xff\"",
	`1e400`,
	`-0.0e-0`,
	`123456789012345678901234567890`,
	`[[[[]]]]`,
	`{} x`,
	``,
	` `,
	`[1,]`,
	`"\u0000\u001f\u007f\u2028 \t"`,
}

// FuzzCanonicalize checks that Canonicalize never panics, that its output is
// valid JSON with the same meaning as the input and is its own canonical
// form, and that it accepts every input encoding/json accepts unless it has
// no canonical form (a duplicate key, a lone surrogate).
func FuzzCanonicalize(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := Canonicalize(in)
		if err != nil {
			se, ok := errors.AsType[*SyntaxError](err)
			if !ok {
				t.Fatalf("error %T %v, want *SyntaxError", err, err)
			}
			if se.Offset < 0 || se.Offset > int64(len(in)) || se.Line < 1 || se.Column < 1 {
				t.Fatalf("error position %d (%d:%d) outside input of %d bytes", se.Offset, se.Line, se.Column, len(in))
			}
			if json.Valid(in) && hasCanonicalForm(in) {
				t.Fatalf("rejected input that encoding/json accepts and RFC 8785 can canonicalize: %v", err)
			}
			return
		}
		if !json.Valid(in) {
			t.Fatalf("accepted input encoding/json rejects, giving %s", out)
		}
		if !json.Valid(out) {
			t.Fatalf("output is not valid JSON: %s", out)
		}
		if !utf8.Valid(out) {
			t.Fatalf("output is not valid UTF-8: %q", out)
		}
		again, err := Canonicalize(out)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not idempotent:\n once %s\ntwice %s, %v", out, again, err)
		}
		if !sameMeaning(t, in, out) {
			t.Fatalf("meaning changed (numbers compared by exact value):\n  in %s\n out %s", in, out)
		}
	})
}

// FuzzCanonicalizeOptions checks normalizers and exclusions: the result
// does not depend on whether the input was canonical first, and applying
// the same options again changes nothing.
func FuzzCanonicalizeOptions(f *testing.F) {
	for i, s := range fuzzSeeds {
		f.Add([]byte(s), uint8(i*37))
	}
	f.Fuzz(func(t *testing.T, in []byte, flags uint8) {
		var opts []Option
		for bit, o := range []Option{TrimSpace(), CollapseSpace(), NFC(), Exclude("/a"), Exclude("/*/b"), Exclude("/*/*/c"), Exclude("/~1~0")} {
			if flags&(1<<bit) != 0 {
				opts = append(opts, o)
			}
		}
		out, err := Canonicalize(in, opts...)
		plain, plainErr := Canonicalize(in)
		if plainErr != nil {
			if err == nil {
				t.Fatalf("accepted with options input rejected without: %v", plainErr)
			}
			return
		}
		if err != nil {
			if _, ok := errors.AsType[*SyntaxError](err); !ok {
				t.Fatalf("error %T %v, want *SyntaxError", err, err)
			}
			return // NFC can merge keys
		}
		if !json.Valid(out) {
			t.Fatalf("output is not valid JSON: %s", out)
		}
		viaCanonical, err := Canonicalize(plain, opts...)
		if err != nil || !bytes.Equal(viaCanonical, out) {
			t.Fatalf("result depends on input form:\n direct %s\n via canonical %s, %v", out, viaCanonical, err)
		}
		again, err := Canonicalize(out, opts...)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("options not idempotent:\n once %s\ntwice %s, %v", out, again, err)
		}
	})
}

// hasCanonicalForm reports whether in, which encoding/json accepts, is one
// idem can canonicalize: valid UTF-8, no lone surrogate escapes and no
// duplicate keys (every number has a canonical form). It is an oracle written
// independently of the parser under test.
func hasCanonicalForm(in []byte) bool {
	if !utf8.Valid(in) || hasLoneSurrogate(in) {
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.UseNumber()
	type frame struct {
		object    bool
		expectKey bool
		keys      map[string]bool
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return true
		}
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = &stack[len(stack)-1]
		}
		if top != nil && top.object && top.expectKey {
			if d, ok := tok.(json.Delim); !ok || d != '}' {
				k := tok.(string)
				if top.keys[k] {
					return false
				}
				top.keys[k] = true
				top.expectKey = false
				continue
			}
		}
		if top != nil && top.object {
			top.expectKey = true
		}
		switch tok := tok.(type) {
		case json.Delim:
			switch tok {
			case '{':
				stack = append(stack, frame{object: true, expectKey: true, keys: map[string]bool{}})
			case '[':
				stack = append(stack, frame{})
			default:
				stack = stack[:len(stack)-1]
			}
		}
	}
}

// hasLoneSurrogate reports whether in, which must be valid JSON, has a \u
// escape of a surrogate that is not half of a high-low pair. In valid JSON
// every backslash starts an escape, so no string tracking is needed.
func hasLoneSurrogate(in []byte) bool {
	pendingHigh := false
	for i := 0; i < len(in); i++ {
		if in[i] != '\\' {
			if pendingHigh {
				return true
			}
			continue
		}
		i++
		if in[i] != 'u' {
			if pendingHigh {
				return true
			}
			continue
		}
		r, _ := strconv.ParseUint(string(in[i+1:i+5]), 16, 16)
		i += 4
		switch {
		case 0xD800 <= r && r < 0xDC00:
			if pendingHigh {
				return true
			}
			pendingHigh = true
		case 0xDC00 <= r && r < 0xE000:
			if !pendingHigh {
				return true
			}
			pendingHigh = false
		default:
			if pendingHigh {
				return true
			}
		}
	}
	return pendingHigh
}
