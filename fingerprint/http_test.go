package fingerprint

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/url"
	"strings"
	"testing"
)

// TestHTTP pins the request fingerprint format: stored fingerprints of the
// middleware and the gateway depend on it.
func TestHTTP(t *testing.T) {
	t.Parallel()
	jsonFP, _ := Sum([]byte(`{"amount":100}`))
	formSum := sha256.Sum256([]byte("a=1&b=2"))
	formFP := "form-sha256:" + hex.EncodeToString(formSum[:])
	tests := []struct {
		name    string
		req     Request
		exclude []string
		body    string // the body fingerprint line of the input
	}{
		{"json", Request{Method: "POST", Path: "/charges", RawQuery: "x=1", MediaType: "application/json", Body: []byte(`{ "amount": 100.0 }`)}, nil, jsonFP},
		{"json with a byte order mark", Request{Method: "POST", Path: "/charges", RawQuery: "x=1", MediaType: "application/json", Body: []byte("\xef\xbb\xbf{\"amount\":100}")}, nil, jsonFP},
		{"json suffix type", Request{Method: "POST", Path: "/charges", RawQuery: "x=1", MediaType: "application/merge-patch+json", Body: []byte(`{"amount":1e2}`)}, nil, jsonFP},
		{"json by shape", Request{Method: "POST", Path: "/charges", RawQuery: "x=1", MediaType: FormMediaType, Body: []byte(`{"amount":100}`)}, nil, jsonFP},
		{"json excluded", Request{Method: "POST", Path: "/charges", RawQuery: "x=1", MediaType: "application/json", Body: []byte(`{"amount":100,"at":"now"}`)}, []string{"/at"}, jsonFP},
		{"empty", Request{Method: "POST", Path: "/charges", RawQuery: "x=1"}, nil, "empty"},
		{"form sorted", Request{Method: "POST", Path: "/charges", RawQuery: "x=1", MediaType: FormMediaType, Body: []byte("b=2&a=1")}, nil, formFP},
		{"form field excluded", Request{Method: "POST", Path: "/charges", RawQuery: "x=1", MediaType: FormMediaType, Body: []byte("b=2&a=1&c~/d=3")}, []string{"/c~0~1d"}, formFP},
		{"form given", Request{Method: "POST", Path: "/charges", RawQuery: "x=1", MediaType: "text/plain", Body: []byte("b=2&a=1"), Form: url.Values{"a": {"1"}, "b": {"2"}}}, nil, formFP},
		{"bad form is bytes", Request{Method: "POST", Path: "/charges", RawQuery: "x=1", MediaType: FormMediaType, Body: []byte("a=%zz")}, nil, Bytes([]byte("a=%zz"))},
		{"bytes", Request{Method: "POST", Path: "/charges", RawQuery: "x=1", MediaType: "text/plain", Body: []byte("b=2&a=1")}, nil, Bytes([]byte("b=2&a=1"))},
		{"coded json is bytes", Request{Method: "POST", Path: "/charges", RawQuery: "x=1", MediaType: "application/json", Body: []byte(`{"amount":100}`), Coding: "aes128gcm"}, nil, "coded aes128gcm " + Bytes([]byte(`{"amount":100}`))},
		{"coded empty", Request{Method: "POST", Path: "/charges", RawQuery: "x=1", Coding: "aes128gcm"}, nil, "empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in, err := HTTPInput(tt.req, tt.exclude)
			if err != nil {
				t.Fatal(err)
			}
			if want := "idemhttp/v1\nPOST\n/charges\nx=1\n" + tt.body; in != want {
				t.Fatalf("HTTPInput = %q, want %q", in, want)
			}
			fp, err := HTTP(tt.req, tt.exclude)
			sum := sha256.Sum256([]byte(in))
			if want := "http-sha256:" + hex.EncodeToString(sum[:]); err != nil || fp != want {
				t.Fatalf("HTTP = %s, %v; want %s", fp, err, want)
			}
		})
	}
}

func TestHTTPErrors(t *testing.T) {
	t.Parallel()
	_, err := HTTP(Request{Method: "POST", Path: "/", MediaType: "application/json", Body: []byte(`{"a":1,"a":2}`)}, nil)
	if _, ok := errors.AsType[*SyntaxError](err); !ok || !strings.Contains(err.Error(), "Content-Type is application/json but the body is not JSON") {
		t.Errorf("duplicate key in a JSON body: %v, want a wrapped *SyntaxError", err)
	}
	if _, err := HTTP(Request{Method: "POST", Path: "/"}, []string{"at"}); !errors.Is(err, ErrInvalidPointer) {
		t.Errorf("bad pointer: %v, want ErrInvalidPointer", err)
	}
}

// TestHTTPLongInput: a request whose Input outgrows the stack buffer Sum
// builds it in still hashes to the SHA-256 of HTTPInput.
func TestHTTPLongInput(t *testing.T) {
	t.Parallel()
	r := Request{Method: "POST", Path: "/" + strings.Repeat("p", 600), RawQuery: strings.Repeat("q=1&", 200), MediaType: "text/plain", Body: []byte("x")}
	in, err := HTTPInput(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(in))
	if fp, err := HTTP(r, nil); err != nil || fp != "http-sha256:"+hex.EncodeToString(sum[:]) {
		t.Fatalf("HTTP = %s, %v; want the SHA-256 of HTTPInput", fp, err)
	}
}

// A zero HTTPHasher has no exclusions: the same fingerprints as NewHTTP(nil).
func TestHTTPHasherZero(t *testing.T) {
	t.Parallel()
	r := Request{Method: "POST", Path: "/p", MediaType: "application/json", Body: []byte(`{"b":1,"a":[2.0]}`)}
	h, err := NewHTTP(nil)
	if err != nil {
		t.Fatal(err)
	}
	want, err := h.Sum(r)
	if got, err2 := new(HTTPHasher).Sum(r); err != nil || err2 != nil || got != want {
		t.Fatalf("zero hasher %s, %v; NewHTTP(nil) %s, %v", got, err2, want, err)
	}
}
