package fingerprint

import (
	"strings"
	"testing"
)

// benchDoc is a request body of about 2 KB: nested objects, an array of
// items, numbers in non-canonical spellings and strings with escapes.
var benchDoc = func() []byte {
	var b strings.Builder
	b.WriteString(`{"request_id":"6f1c2a9e-0b7d-4c1e-9a55-2f3e4d5c6b7a","created_at":"2024-05-01T12:34:56.789Z",`)
	b.WriteString(`"customer":{"name":"Zo\u00eb  M\u00fcller","email":"zoe@example.com","address":{"line1":"1 Rue de la Paix","city":"Paris","zip":"75002","country":"FR"}},`)
	b.WriteString(`"items":[`)
	for i := range 14 {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`{"sku":"SKU-00`)
		b.WriteByte(byte('0' + i%10))
		b.WriteString(`","qty":2,"unit_price":19.90,"discount":0.0,"note":"gift \u2014 wrap \"nicely\"","tags":["a","b"]}`)
	}
	b.WriteString(`],"total":477.60,"currency":"EUR","metadata":{"source":"web","attempt":3,"ua":"Mozilla/5.0 (X11; Linux x86_64)"}}`)
	return []byte(b.String())
}()

func BenchmarkCanonicalize(b *testing.B) {
	b.Run("plain", func(b *testing.B) {
		b.SetBytes(int64(len(benchDoc)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Canonicalize(benchDoc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("options", func(b *testing.B) {
		opts := []Option{Exclude("/request_id"), Exclude("/created_at"), Exclude("/metadata/attempt"), Exclude("/items/*/note"), CollapseSpace(), NFC()}
		b.SetBytes(int64(len(benchDoc)))
		b.ReportAllocs()
		for b.Loop() {
			if _, err := Canonicalize(benchDoc, opts...); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func TestBenchDocIsValid(t *testing.T) {
	t.Parallel()
	if n := len(benchDoc); n < 1800 || n > 2400 {
		t.Errorf("benchDoc is %d bytes, want about 2 KB", n)
	}
	if _, err := Canonicalize(benchDoc); err != nil {
		t.Fatal(err)
	}
}
