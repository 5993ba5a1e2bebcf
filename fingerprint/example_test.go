package fingerprint_test

import (
	"errors"
	"fmt"

	"github.com/idemdev/idem/fingerprint"
)

func ExampleCanonicalize() {
	out, err := fingerprint.Canonicalize([]byte(`{"b":[1.0,2e21,"\u00e9"],"a":-0}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(out))
	// Output: {"a":0,"b":[1,2e+21,"é"]}
}

func ExampleSum() {
	a, _ := fingerprint.Sum([]byte(`{"amount": 5.00, "currency": "EUR"}`))
	b, _ := fingerprint.Sum([]byte(`{"currency":"EUR","amount":5}`))
	fmt.Println(a == b)
	fmt.Println(a)
	// Output:
	// true
	// jcs-sha256:1af0eb777ab1b3a8a12976724fb48ddab9097e1508032cf344d28c74ac0fc3d0
}

func ExampleExclude() {
	first := []byte(`{"params":{"request_id":"r-1","amount":5},"items":[{"id":1,"at":"09:00"}]}`)
	retry := []byte(`{"params":{"request_id":"r-2","amount":5},"items":[{"id":1,"at":"09:01"}]}`)
	opts := []fingerprint.Option{fingerprint.Exclude("/params/request_id"), fingerprint.Exclude("/items/*/at")}

	out, _ := fingerprint.Canonicalize(retry, opts...)
	fmt.Println(string(out))
	a, _ := fingerprint.Sum(first, opts...)
	b, _ := fingerprint.Sum(retry, opts...)
	fmt.Println(a == b)
	// Output:
	// {"items":[{"id":1}],"params":{"amount":5}}
	// true
}

func ExampleCollapseSpace() {
	out, _ := fingerprint.Canonicalize([]byte(`{"name":"  Ada \t Lovelace "}`), fingerprint.CollapseSpace())
	fmt.Println(string(out))
	// Output: {"name":"Ada Lovelace"}
}

func ExampleNFC() {
	composed := []byte(`{"city":"Malm\u00f6"}`)    // ö as one character
	decomposed := []byte(`{"city":"Malmo\u0308"}`) // o + combining diaeresis
	a, _ := fingerprint.Sum(composed, fingerprint.NFC())
	b, _ := fingerprint.Sum(decomposed, fingerprint.NFC())
	c, _ := fingerprint.Sum(decomposed)
	fmt.Println(a == b, a == c)
	// Output: true false
}

func ExampleOf() {
	type job struct {
		Model  string            `json:"model"`
		Params map[string]string `json:"params"`
	}
	a, _ := fingerprint.Of(job{Model: "m1", Params: map[string]string{"request_id": "r-1", "prompt": "hi"}},
		fingerprint.Exclude("/params/request_id"))
	b, _ := fingerprint.Of(job{Model: "m1", Params: map[string]string{"request_id": "r-2", "prompt": "hi"}},
		fingerprint.Exclude("/params/request_id"))
	fmt.Println(a == b)
	// Output: true
}

func ExampleBytes() {
	fmt.Println(fingerprint.Bytes([]byte("a=1&b=2")))
	// Output: raw-sha256:8e85be58c1c372ac29fe7bfa80d8ddcbd04a4032c7b51c1c026d67c55b1ab23f
}

func ExampleSyntaxError() {
	_, err := fingerprint.Canonicalize([]byte("{\n  \"a\": 1,\n  \"a\": 2\n}"))
	fmt.Println(err)
	if se, ok := errors.AsType[*fingerprint.SyntaxError](err); ok {
		fmt.Printf("line %d, column %d: %s\n", se.Line, se.Column, se.Msg)
	}
	// Output:
	// fingerprint: invalid JSON at offset 14: duplicate key "a"
	// line 3, column 3: duplicate key "a"
}

func ExampleExactNumbers() {
	canonical, _ := fingerprint.Canonicalize([]byte(`{"to_account": 9007199254740993, "amount": 12.50}`))
	fmt.Println(string(canonical))
	exact, _ := fingerprint.ExactNumbers(canonical)
	for _, n := range exact {
		fmt.Printf("%s: %s kept exact (RFC 8785: %s)\n", n.Pointer, n.Exact, n.RFC8785)
	}
	// Output:
	// {"amount":12.5,"to_account":9007199254740993}
	// /to_account: 9007199254740993 kept exact (RFC 8785: 9007199254740992)
}
