package fingerprint

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// The fingerprints below are pinned: they are stored in databases, so a
// change here breaks every stored key that has them.
const (
	briefInput = `{"b":[1.0,2e21,"\u00e9"],"a":-0}`
	briefSum   = "jcs-sha256:fc5d73f26a7f20ad8fd9463cf7552d6703a2d7fc9d22fd9cb23b5c3541e0a428" // of {"a":0,"b":[1,2e+21,"é"]}
	paymentSum = "jcs-sha256:1af0eb777ab1b3a8a12976724fb48ddab9097e1508032cf344d28c74ac0fc3d0" // of {"amount":5,"currency":"EUR"}
)

func TestHash(t *testing.T) {
	t.Parallel()
	if got, want := Hash(nil), Scheme+":e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"; got != want {
		t.Errorf("Hash(nil) = %s, want %s", got, want)
	}
	if got := Hash([]byte(`{"a":0,"b":[1,2e+21,"é"]}`)); got != briefSum {
		t.Errorf("Hash = %s, want %s", got, briefSum)
	}
}

func TestSum(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		opts []Option
		want string
	}{
		{briefInput, nil, briefSum},
		{`{"currency":"EUR","amount":5}`, nil, paymentSum},
		{` { "amount" : 5.0 , "currency" : "\u0045UR" } `, nil, paymentSum},
		{`{"currency":"EUR","amount":5e0,"request_id":"r-9"}`, []Option{Exclude("/request_id")}, paymentSum},
		{`{"currency":" EUR ","amount":50e-1}`, []Option{TrimSpace()}, paymentSum},
	}
	for _, tt := range tests {
		got, err := Sum([]byte(tt.in), tt.opts...)
		if err != nil || got != tt.want {
			t.Errorf("Sum(%s) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
	if got, err := Sum([]byte(`{"amount":5,"currency":"USD"}`)); err != nil || got == paymentSum {
		t.Errorf("a different request has the same fingerprint: %s, %v", got, err)
	}
	got, err := Sum([]byte(`{"a":1,"a":1}`))
	if _, ok := errors.AsType[*SyntaxError](err); !ok || got != "" {
		t.Errorf("Sum(duplicate keys) = %q, %v; want \"\" and a *SyntaxError", got, err)
	}
}

func TestOf(t *testing.T) {
	t.Parallel()
	type payment struct {
		Currency  string  `json:"currency"`
		Amount    float64 `json:"amount"`
		RequestID string  `json:"request_id,omitempty"`
	}
	got, err := Of(payment{Currency: "EUR", Amount: 5, RequestID: "r-1"}, Exclude("/request_id"))
	if err != nil || got != paymentSum {
		t.Errorf("Of(struct) = %s, %v; want %s", got, err, paymentSum)
	}
	got, err = Of(map[string]any{"amount": 5, "currency": "EUR"})
	if err != nil || got != paymentSum {
		t.Errorf("Of(map) = %s, %v; want %s", got, err, paymentSum)
	}
	// encoding/json escapes <, > and &; the canonical form does not.
	a, errA := Of("<&>")
	b, errB := Sum([]byte(`"<&>"`))
	if errA != nil || errB != nil || a != b {
		t.Errorf("Of(\"<&>\") = %s, %v; Sum = %s, %v", a, errA, b, errB)
	}
	if _, err := Of(math.NaN()); err == nil || !strings.HasPrefix(err.Error(), "fingerprint: ") {
		t.Errorf("Of(NaN) error = %v, want a fingerprint error", err)
	}
	if _, err := Of(make(chan int)); err == nil {
		t.Error("Of(chan) succeeded")
	}
}

func TestBytes(t *testing.T) {
	t.Parallel()
	if got, want := Bytes([]byte("a=1&b=2")), "raw-sha256:8e85be58c1c372ac29fe7bfa80d8ddcbd04a4032c7b51c1c026d67c55b1ab23f"; got != want {
		t.Errorf("Bytes = %s, want %s", got, want)
	}
	canonical := []byte(`{"a":0,"b":[1,2e+21,"é"]}`)
	if Bytes(canonical) == Hash(canonical) {
		t.Error("Bytes and Hash agree on the same bytes; the scheme prefix must tell them apart")
	}
	if !strings.HasPrefix(Bytes(nil), RawScheme+":") {
		t.Errorf("Bytes(nil) = %s, want prefix %s:", Bytes(nil), RawScheme)
	}
}
