package fingerprint

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"mime/multipart"
	"net/textproto"
	"strings"
	"testing"
)

// form builds a multipart/form-data body with boundary; each field is
// name, file name ("" for a plain field), content type and content.
func form(t *testing.T, boundary string, fields ...[4]string) []byte {
	t.Helper()
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	if err := w.SetBoundary(boundary); err != nil {
		t.Fatal(err)
	}
	for _, f := range fields {
		h := textproto.MIMEHeader{}
		disp := `form-data; name="` + f[0] + `"`
		if f[1] != "" {
			disp += `; filename="` + f[1] + `"`
		}
		h.Set("Content-Disposition", disp)
		if f[2] != "" {
			h.Set("Content-Type", f[2])
		}
		pw, err := w.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		pw.Write([]byte(f[3]))
	}
	w.Close()
	return b.Bytes()
}

// TestMultipartFormat pins the multipart body fingerprint: stored
// fingerprints depend on it.
func TestMultipartFormat(t *testing.T) {
	t.Parallel()
	body := form(t, "b1", [4]string{"purpose", "", "", "evidence"}, [4]string{"file", "a.txt", "text/plain", "hello"})
	part := func(name, file, mt, content string) []byte {
		h := sha256.New()
		for _, s := range []string{name, file, mt} {
			h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(s))))
			h.Write([]byte(s))
		}
		h.Write([]byte(content))
		return h.Sum(nil)
	}
	all := sha256.Sum256(append(part("file", "a.txt", "text/plain", "hello"), part("purpose", "", "", "evidence")...))
	in, err := HTTPInput(Request{Method: "POST", Path: "/files", MediaType: MultipartMediaType, Body: body}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "idemhttp/v1\nPOST\n/files\n\nmultipart-sha256:" + hex.EncodeToString(all[:]); in != want {
		t.Fatalf("HTTPInput = %q, want %q", in, want)
	}
}

// Clients draw a new boundary for every request: a multipart body built
// again is the same request; different content, file name or media type
// is another; fields named by a top-level pointer are left out; a body
// that is not multipart as labelled is fingerprinted as bytes.
func TestMultipartSameRequest(t *testing.T) {
	t.Parallel()
	fp := func(body []byte, exclude ...string) string {
		t.Helper()
		s, err := HTTP(Request{Method: "POST", Path: "/files", MediaType: MultipartMediaType, Body: body}, exclude)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	file := [4]string{"file", "a.txt", "text/plain", "hello"}
	purpose := [4]string{"purpose", "", "", "evidence"}
	first := fp(form(t, "----WebKitFormBoundary7MA4YWxkTrZu0gW", purpose, file))
	for name, body := range map[string][]byte{
		"another boundary":        form(t, "a5b2c1e0f9d84f0b9a1b2c3d4e5f6a7b", purpose, file),
		"curl's boundary":         form(t, "------------------------d74496d66958873e", purpose, file),
		"fields in another order": form(t, "x", file, purpose),
		"LF line ends":            bytes.ReplaceAll(form(t, "lf", purpose, file), []byte("\r\n"), []byte("\n")),
		"quoted-printable":        []byte("--q\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nevidence\r\n--q\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\nContent-Type: text/plain\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\nhel=6Co\r\n--q--\r\n"),
	} {
		if got := fp(body); got != first {
			t.Errorf("%s: %s, want %s (the same request)", name, got, first)
		}
	}
	for name, body := range map[string][]byte{
		"other content":    form(t, "b", purpose, [4]string{"file", "a.txt", "text/plain", "hello!"}),
		"other file name":  form(t, "b", purpose, [4]string{"file", "b.txt", "text/plain", "hello"}),
		"other media type": form(t, "b", purpose, [4]string{"file", "a.txt", "application/octet-stream", "hello"}),
		"a field less":     form(t, "b", file),
		"a field more":     form(t, "b", purpose, file, [4]string{"note", "", "", ""}),
	} {
		if got := fp(body); got == first {
			t.Errorf("%s: the same fingerprint as the first request", name)
		}
	}
	a := form(t, "b", [4]string{"tag", "", "", "1"}, [4]string{"tag", "", "", "2"})
	b := form(t, "b", [4]string{"tag", "", "", "2"}, [4]string{"tag", "", "", "1"})
	if fp(a) == fp(b) {
		t.Error("values of one field in another order: the same fingerprint")
	}
	withTime := form(t, "c", purpose, file, [4]string{"sent_at", "", "", "now"})
	if got := fp(withTime, "/sent_at"); got != first {
		t.Errorf("excluded field: %s, want %s", got, first)
	}
	for name, body := range map[string]string{
		"no boundary line":  "purpose=evidence",
		"unterminated":      "--b\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nevidence",
		"boundary too long": "--" + strings.Repeat("b", 71) + "\r\n",
	} {
		if got, want := fp([]byte(body)), HTTPScheme; !strings.HasPrefix(got, want) {
			t.Fatalf("%s: %s", name, got)
		}
		in, _ := HTTPInput(Request{Method: "POST", Path: "/files", MediaType: MultipartMediaType, Body: []byte(body)}, nil)
		if !strings.HasSuffix(in, "\n"+Bytes([]byte(body))) {
			t.Errorf("%s: body line of %q, want Bytes", name, in)
		}
	}
}

// FuzzMultipart: any body labelled multipart fingerprints without a panic
// or an error.
func FuzzMultipart(f *testing.F) {
	f.Add([]byte("--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1\r\n--b--\r\n"))
	f.Add([]byte("--b\r\n\r\n--b--"))
	f.Add([]byte("--\r\n"))
	f.Fuzz(func(t *testing.T, body []byte) {
		if _, err := HTTP(Request{Method: "POST", Path: "/", MediaType: MultipartMediaType, Body: body}, []string{"/a"}); err != nil {
			t.Fatal(err)
		}
	})
}

// MultipartFields reads the fields that are not files from the parts the
// fingerprint counts, whatever the boundary; a body that is not multipart
// as the fingerprint reads it is not ok.
func TestMultipartFields(t *testing.T) {
	t.Parallel()
	body := form(t, "any", [4]string{"idempotency_key", "", "", "form-1"}, [4]string{"receipt", "r.pdf", "application/pdf", "%PDF"},
		[4]string{"tag", "", "", "a"}, [4]string{"tag", "", "", "b"})
	f, ok := MultipartFields(body)
	if !ok || f.Get("idempotency_key") != "form-1" || len(f["tag"]) != 2 || f.Has("receipt") {
		t.Fatalf("%v %v", f, ok)
	}
	if f, ok := MultipartFields([]byte("--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\n1")); ok {
		t.Fatalf("unterminated body: %v", f)
	}
}
