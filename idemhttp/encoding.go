package idemhttp

import (
	"bufio"
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

// A stored response keeps its Content-Encoding whatever AllowHeaders says:
// the body is stored as it was sent, and without the label a gzip body
// replays as garbage. A replay goes to a client that may not accept that
// coding (the first request said Accept-Encoding: gzip, the retry does
// not): such a client gets the body decoded, so that every replay decodes
// to what the first answer decoded to. gzip, deflate, br and zstd are
// decoded; a coding the middleware cannot decode (or a list of codings) is
// replayed as stored, labelled.

// acceptsCoding reports whether r's Accept-Encoding accepts coding
// (RFC 9110 §12.5.3). A request without Accept-Encoding accepts only
// identity: in practice such clients (curl without --compressed) do not
// decode anything.
func acceptsCoding(r *http.Request, coding string) bool {
	coding = normalCoding(coding)
	if coding == "identity" {
		return true
	}
	star, explicit := -1.0, -1.0
	for _, v := range r.Header.Values("Accept-Encoding") {
		for part := range strings.SplitSeq(v, ",") {
			name, params, _ := strings.Cut(part, ";")
			name = normalCoding(name)
			q := 1.0
			for p := range strings.SplitSeq(params, ";") {
				if k, val, ok := strings.Cut(strings.TrimSpace(p), "="); ok && strings.EqualFold(k, "q") {
					if f, err := strconv.ParseFloat(strings.TrimSpace(val), 64); err == nil {
						q = f
					}
				}
			}
			switch name {
			case coding:
				explicit = q
			case "*":
				star = q
			}
		}
	}
	if explicit >= 0 {
		return explicit > 0
	}
	return star > 0
}

// normalCoding lower-cases a content coding and maps x-gzip to gzip.
func normalCoding(c string) string {
	c = strings.ToLower(strings.TrimSpace(c))
	if c == "x-gzip" {
		return "gzip"
	}
	return c
}

// decoder returns a reader of body without its content coding, or nil if
// the coding is one the middleware does not decode, or a body that does
// not even start as that coding says: it then goes out as stored, labelled
// with its coding, rather than empty.
func decoder(coding string, body []byte) io.ReadCloser {
	dec, err := newDecoder(normalCoding(coding), bytes.NewReader(body))
	if err != nil {
		return nil
	}
	return dec
}

// errUnknownCoding is newDecoder's answer for a coding it does not decode.
var errUnknownCoding = errors.New("unknown content coding")

// zstdMaxWindow is the largest zstd window decoded: the limit RFC 9659
// sets for the zstd content coding (a frame may ask for up to 3.75 TB).
const zstdMaxWindow = 8 << 20

// newDecoder returns a reader of what r holds without coding (lower case,
// x-gzip already gzip): gzip, deflate (zlib-wrapped per RFC 9110; some
// senders use raw deflate), br and zstd. A coding it does not decode is
// errUnknownCoding.
func newDecoder(coding string, r io.Reader) (io.ReadCloser, error) {
	switch coding {
	case "gzip":
		return gzip.NewReader(r)
	case "deflate":
		br := bufio.NewReader(r)
		if h, err := br.Peek(2); err == nil && h[0]&0x0f == 8 && (uint(h[0])<<8|uint(h[1]))%31 == 0 {
			return zlib.NewReader(br)
		}
		return flate.NewReader(br), nil
	case "br":
		return io.NopCloser(brotli.NewReader(r)), nil
	case "zstd":
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true), zstd.WithDecoderMaxWindow(zstdMaxWindow))
		if err != nil {
			return nil, err
		}
		return zr.IOReadCloser(), nil
	}
	return nil, errUnknownCoding
}

// A request body in a content coding (Content-Encoding: gzip, sent by
// clients that compress what they upload) is decoded for the fingerprint
// and for a key read from the body, so that a retry compressed again (gzip
// writes the time into its header) or sent plain is the same request. The
// request goes on to the handler (the upstream) as it came, coded.

// requestCoding returns the request's content codings in the order they
// were applied, lower case, x-gzip as gzip and identity left out.
func requestCoding(h http.Header) []string {
	var out []string
	for _, v := range h.Values("Content-Encoding") {
		for part := range strings.SplitSeq(v, ",") {
			if c := normalCoding(part); c != "" && c != "identity" {
				out = append(out, c)
			}
		}
	}
	return out
}

// errDecodedTooLarge is decodeRequest's error for a body that decodes to
// more than its limit.
var errDecodedTooLarge = errors.New("the decoded body is too large")

// decodeRequest returns body without codings (requestCoding's), at most
// limit bytes of it (errDecodedTooLarge beyond, so a small body that
// inflates to gigabytes is refused after limit+1 bytes). When a coding is
// one the middleware does not decode, it returns body as it is and ok
// false. A body that does not decode as its codings say is an error.
func decodeRequest(codings []string, body []byte, limit int64) (plain []byte, ok bool, err error) {
	var r io.Reader = bytes.NewReader(body)
	for i := len(codings) - 1; i >= 0; i-- {
		dec, err := newDecoder(codings[i], r)
		if errors.Is(err, errUnknownCoding) {
			return body, false, nil
		}
		if err != nil {
			return nil, true, fmt.Errorf("the body is not %s as its Content-Encoding says: %v", codings[i], err)
		}
		defer dec.Close()
		r = dec
	}
	plain, err = io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, true, fmt.Errorf("the body does not decode as its Content-Encoding (%s) says: %v", strings.Join(codings, ", "), err)
	}
	if int64(len(plain)) > limit {
		return nil, true, errDecodedTooLarge
	}
	return plain, true, nil
}

// decodeForClient prepares h (the stored headers) and body for a client
// that does not accept the stored coding: the coding is removed and the
// entity tag weakened, since the bytes are no longer the stored ones. It
// returns nil when the body goes out as stored.
func decodeForClient(r *http.Request, h http.Header, body []byte) io.ReadCloser {
	coding := h.Get("Content-Encoding")
	if coding == "" || acceptsCoding(r, coding) {
		return nil
	}
	dec := decoder(coding, body)
	if dec == nil {
		return nil
	}
	h.Del("Content-Encoding")
	if etag := h.Get("ETag"); etag != "" && !strings.HasPrefix(etag, "W/") {
		h.Set("ETag", "W/"+etag)
	}
	return dec
}
