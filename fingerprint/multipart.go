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
	boundary, ok := firstBoundary(body)
	if !ok {
		return sum, false
	}
	mr := multipart.NewReader(bytes.NewReader(body), boundary)
	var parts []multipartPart
	h := sha256.New()
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return sum, false
		}
		name := p.FormName()
		if skip[name] {
			continue
		}
		h.Reset()
		mt, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		for _, s := range [...]string{name, p.FileName(), mt} {
			writeLen(h, s)
		}
		if _, err := io.Copy(h, p); err != nil {
			return sum, false
		}
		part := multipartPart{name: name}
		h.Sum(part.sum[:0])
		parts = append(parts, part)
	}
	slices.SortStableFunc(parts, func(a, b multipartPart) int { return cmp.Compare(a.name, b.name) })
	h.Reset()
	for _, p := range parts {
		h.Write(p.sum[:])
	}
	h.Sum(sum[:0])
	return sum, true
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
