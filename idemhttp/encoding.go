package idemhttp

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// A stored response keeps its Content-Encoding whatever AllowHeaders says:
// the body is stored as it was sent, and without the label a gzip body
// replays as garbage. A replay goes to a client that may not accept that
// coding (the first request said Accept-Encoding: gzip, the retry does
// not): such a client gets the body decoded, so that every replay decodes
// to what the first answer decoded to. gzip and deflate are decoded; a
// coding the middleware cannot decode (br, zstd) is replayed as stored,
// labelled.

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
	switch normalCoding(coding) {
	case "gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil
		}
		return zr
	case "deflate": // zlib-wrapped per RFC 9110; some servers send raw deflate
		if zr, err := zlib.NewReader(bytes.NewReader(body)); err == nil {
			return zr
		}
		return flate.NewReader(bytes.NewReader(body))
	}
	return nil
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
