package idemhttp

import (
	"bytes"
	"compress/gzip"
	"errors"
	"net/http"
	"testing"
)

// FuzzDecodeRequest: any Content-Encoding with any body either decodes
// to at most the limit, or is an error, or is left as it came for a
// coding the middleware does not decode; it never panics, and a body
// that decodes is what was compressed.
func FuzzDecodeRequest(f *testing.F) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(`{"amount":1000}`))
	zw.Close()
	for _, c := range []string{"gzip", "x-gzip", "deflate", "br", "zstd", "gzip, zstd", "identity", "aes128gcm", " GZIP ,identity", ""} {
		f.Add(c, gz.Bytes())
		f.Add(c, []byte(`{"amount":1000}`))
		f.Add(c, []byte{0x28, 0xb5, 0x2f, 0xfd, 0, 0x58, 0, 0, 0, 0}) // a zstd frame header
	}
	const limit = 64 << 10
	f.Fuzz(func(t *testing.T, coding string, body []byte) {
		h := http.Header{}
		h.Set("Content-Encoding", coding)
		cs := requestCoding(h)
		plain, ok, err := decodeRequest(cs, body, limit)
		switch {
		case errors.Is(err, errDecodedTooLarge):
		case err != nil:
			if plain != nil {
				t.Fatalf("an error (%v) with a body", err)
			}
		case !ok:
			if !bytes.Equal(plain, body) {
				t.Fatal("a coding not decoded, but the body changed")
			}
		case len(plain) > limit:
			t.Fatalf("decoded %d bytes, over the limit %d", len(plain), limit)
		case len(cs) == 1 && cs[0] == "gzip" && bytes.Equal(body, gz.Bytes()) && string(plain) != `{"amount":1000}`:
			t.Fatalf("gzip decoded to %q", plain)
		}
	})
}
