package idemhttp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
)

// scopeHMAC is label-hmac:HMAC-SHA256(key, value) in hex, whatever the
// lengths, with the pooled MACs reused under one key and rebuilt under
// another.
func TestScopeHMAC(t *testing.T) {
	want := func(key []byte, label, value string) string {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(value))
		return label + "-hmac:" + hex.EncodeToString(m.Sum(nil))
	}
	keys := [][]byte{[]byte("k1"), []byte(strings.Repeat("k", 100))}
	labels := []string{"authorization", "", strings.Repeat("l", 200)}
	values := []string{"Bearer a", "Bearer b", strings.Repeat("v", 10<<10), "x"}
	for range 3 {
		for _, k := range keys {
			for _, l := range labels {
				for _, v := range values {
					if got, w := scopeHMAC(k, l, v), want(k, l, v); got != w {
						t.Fatalf("scopeHMAC(%q, %.10q, %.10q) = %s, want %s", k, l, v, got, w)
					}
				}
			}
		}
	}
	if got := scopeHMAC(keys[0], "authorization", ""); got != "" {
		t.Errorf("no credential: %q, want no scope", got)
	}
	if got := scopeHMAC(nil, "authorization", "Bearer a"); got != "" {
		t.Errorf("no secret: %q, want no scope", got)
	}
}

// A scope costs one allocation, its string, once the MAC is warm. The MAC
// is held here, not taken from the pool, so the count holds under -race too
// (whose pool drops some puts on purpose).
func TestScopeHMACAllocs(t *testing.T) {
	key := []byte("secret")
	km := &keyedMAC{key: key, mac: hmac.New(sha256.New, key)}
	km.scope("authorization", "Bearer warm")
	if n := testing.AllocsPerRun(100, func() {
		km.mac.Reset()
		km.scope("authorization", "Bearer token")
	}); n > 1 {
		t.Errorf("a scope: %v allocations, want 1", n)
	}
}
