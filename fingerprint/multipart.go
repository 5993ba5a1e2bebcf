package fingerprint

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash"
	"io"
	"mime"
	"mime/multipart"
	"net/url"
	"slices"
	"strings"
)

// MultipartMediaType is the media type of an HTML form body with files
// (RFC 7578).
const MultipartMediaType = "multipart/form-data"

// MultipartScheme names the fingerprint of a multipart/form-data body:
// its parts without the boundary (see HTTPInput).
const MultipartScheme = "multipart-sha256"

// multipartPart is one part's name and digest.
type multipartPart struct {
	name string
	sum  [sha256.Size]byte
}

// multipartSum returns the fingerprint of a multipart/form-data body
// without its boundary, which clients draw at random for every request
// (Python requests, Node's FormData, curl -F), so that a retry built anew
// is the same request. Each part counts by its field name, file name,
// media type and content (a quoted-printable part decoded); the parts are
// ordered by field name, as a form's fields are, those of one name in the
// order sent; parts named by skip are left out. The boundary is the body's
// first line: a body that does not start with one, or does not parse to
// its closing delimiter, is not multipart here (ok false), and its
// fingerprint is Bytes.
func multipartSum(body []byte, skip map[string]bool) (sum [sha256.Size]byte, ok bool) {
	var parts []multipartPart
	h := sha256.New()
	ok = eachPart(body, func(p *multipart.Part) error {
		name := p.FormName()
		if skip[name] {
			return nil
		}
		h.Reset()
		mt, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		for _, s := range [...]string{name, p.FileName(), mt} {
			writeLen(h, s)
		}
		if _, err := io.Copy(h, p); err != nil {
			return err
		}
		part := multipartPart{name: name}
		h.Sum(part.sum[:0])
		parts = append(parts, part)
		return nil
	})
	if !ok {
		return sum, false
	}
	slices.SortStableFunc(parts, func(a, b multipartPart) int { return cmp.Compare(a.name, b.name) })
	h.Reset()
	for _, p := range parts {
		h.Write(p.sum[:])
	}
	h.Sum(sum[:0])
	return sum, true
}

// MultipartFields returns the fields of a multipart/form-data body that
// are not files (an HTML form with a file input posts one: its hidden
// fields are these), read from the parts the fingerprint counts; ok is
// false for a body that is not multipart as the fingerprint reads it
// (see HTTPInput).
func MultipartFields(body []byte) (fields url.Values, ok bool) {
	fields = url.Values{}
	ok = eachPart(body, func(p *multipart.Part) error {
		if p.FileName() != "" {
			return nil
		}
		v, err := io.ReadAll(p)
		fields.Add(p.FormName(), string(v))
		return err
	})
	if !ok {
		return nil, false
	}
	return fields, true
}

// eachPart calls fn with each part of a multipart body in turn, the
// boundary being the body's first line; it reports false for a body that
// does not start with one, or does not parse to its closing delimiter, or
// when fn fails.
func eachPart(body []byte, fn func(*multipart.Part) error) bool {
	boundary, ok := firstBoundary(body)
	if !ok {
		return false
	}
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return true
		}
		if err != nil || fn(p) != nil {
			return false
		}
	}
}

// writeLen writes s to h after its length, so that no two lists of
// strings write the same bytes.
func writeLen(h hash.Hash, s string) {
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(s))))
	io.WriteString(h, s)
}

// firstBoundary returns the boundary of the delimiter that opens body:
// "--", 1 to 70 characters (RFC 2046, 5.1.1), optional white space, CRLF
// (or LF).
func firstBoundary(body []byte) (string, bool) {
	line, _, found := bytes.Cut(body, []byte("\n"))
	if !found || !bytes.HasPrefix(line, []byte("--")) {
		return "", false
	}
	b := strings.TrimRight(string(line[2:]), " \t\r")
	if b == "" || len(b) > 70 {
		return "", false
	}
	return b, true
}
