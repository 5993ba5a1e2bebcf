package idemhttp_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/idemdev/idem/idemhttp"
)

func TestParseKey(t *testing.T) {
	t.Parallel()
	good := map[string]string{
		`abc`:                                  "abc",
		`"abc"`:                                "abc",
		`  "abc" `:                             "abc",
		"\tabc\t":                              "abc",
		`"a b"`:                                "a b",
		`"a\"b"`:                               `a"b`,
		`"a\\b"`:                               `a\b`,
		`"a,b"`:                                "a,b",
		`123e4567-e89b-12d3-a456-426614174000`: "123e4567-e89b-12d3-a456-426614174000",
		`order-42;x`:                           "order-42;x",
		strings.Repeat("k", 255):               strings.Repeat("k", 255),
		`"` + strings.Repeat("k", 255) + `"`:   strings.Repeat("k", 255),
	}
	for in, want := range good {
		got, err := idemhttp.ParseKey(in)
		if err != nil || got != want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := []string{
		``, `   `, `""`, `"`, `"abc`, `abc"`, `"abc"x`, `"abc";p=1`, `"a\b"`, `"a\"`,
		`a b`, `a,b`, `a\b`, "a\x00b", "a\r\nb", "a\nb", "\"a\x7fb\"", "é", `"é"`, "a\tb",
		strings.Repeat("k", 256), `"` + strings.Repeat("k", 256) + `"`, strings.Repeat("k", 10000),
	}
	for _, in := range bad {
		if got, err := idemhttp.ParseKey(in); !errors.Is(err, idemhttp.ErrInvalidKey) {
			t.Errorf("ParseKey(%q) = %q, %v; want ErrInvalidKey", in, got, err)
		}
	}
}

// FuzzParseKey checks that ParseKey never panics, that every key it accepts
// is 1 to 255 bytes of printable ASCII, and that a key quoted as an
// sf-string parses back to itself.
func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`abc`, `"abc"`, `"a\"b"`, `"a\\"`, `"`, ``, "a\x00", `"a";b`, strings.Repeat("x", 256), "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		k, err := idemhttp.ParseKey(in)
		if err != nil {
			if !errors.Is(err, idemhttp.ErrInvalidKey) {
				t.Fatalf("ParseKey(%q): error %v does not match ErrInvalidKey", in, err)
			}
			return
		}
		if len(k) == 0 || len(k) > 255 {
			t.Fatalf("ParseKey(%q) = %q: %d bytes", in, k, len(k))
		}
		for i := 0; i < len(k); i++ {
			if k[i] < 0x20 || k[i] > 0x7e {
				t.Fatalf("ParseKey(%q) = %q: byte 0x%02x at %d", in, k, k[i], i)
			}
		}
		q := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(k) + `"`
		if k2, err := idemhttp.ParseKey(q); err != nil || k2 != k {
			t.Fatalf("ParseKey(%s) = %q, %v; want %q (from %q)", q, k2, err, k, strconv.Quote(in))
		}
	})
}
