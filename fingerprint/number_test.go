package fingerprint

import (
	"encoding/json"
	"math"
	"strconv"
	"testing"
)

// TestAppendNumber checks the IEEE 754 bit patterns of RFC 8785, Appendix B
// (taken from the cyberphone test data), and a few more.
func TestAppendNumber(t *testing.T) {
	t.Parallel()
	tests := []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"}, // -0
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
		{math.Float64bits(1), "1"},
		{math.Float64bits(-1.5), "-1.5"},
		{math.Float64bits(100), "100"},
		{math.Float64bits(123e-20), "1.23e-18"},
		{math.Float64bits(0.1), "0.1"},
		{math.Float64bits(1e-7), "1e-7"},
		{math.Float64bits(1.5e-7), "1.5e-7"},
		{math.Float64bits(2e21), "2e+21"},
		{math.Float64bits(1.5e21), "1.5e+21"},
		{math.Float64bits(1e20), "100000000000000000000"},
		{math.Float64bits(123456789012345680000), "123456789012345680000"},
		{math.Float64bits(math.SmallestNonzeroFloat64 * 3), "1.5e-323"},
		{math.Float64bits(0x1p-1022), "2.2250738585072014e-308"},
	}
	for _, tt := range tests {
		f := math.Float64frombits(tt.bits)
		if got := string(appendNumber(nil, f)); got != tt.want {
			t.Errorf("appendNumber(%#016x = %v) = %s, want %s", tt.bits, f, got, tt.want)
		}
		// The same number written in JSON canonicalizes to the same form.
		lit := strconv.FormatFloat(f, 'g', -1, 64)
		if got, err := Canonicalize([]byte(lit)); err != nil || string(got) != tt.want {
			t.Errorf("Canonicalize(%s) = %s, %v; want %s", lit, got, err, tt.want)
		}
	}
}

// FuzzNumber checks appendNumber against encoding/json, whose float64
// encoding is documented as ECMAScript's, apart from -0, and checks that the
// output reads back as the same float64.
func FuzzNumber(f *testing.F) {
	for _, seed := range []uint64{0, 1 << 63, 1, 0x7fefffffffffffff, 0x444b1ae4d6e2ef50, 0x3eb0c6f7a0b5ed8d, 0x41b3de4355555557} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, bits uint64) {
		x := math.Float64frombits(bits)
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return
		}
		got := string(appendNumber(nil, x))
		if x == 0 {
			if got != "0" {
				t.Fatalf("appendNumber(%v) = %s, want 0", x, got)
			}
			return
		}
		want, err := json.Marshal(x)
		if err != nil {
			t.Fatal(err)
		}
		if got != string(want) {
			t.Fatalf("appendNumber(%#016x) = %s, encoding/json says %s", bits, got, want)
		}
		back, err := strconv.ParseFloat(got, 64)
		if err != nil || back != x {
			t.Fatalf("appendNumber(%#016x) = %s, which reads back as %v, %v", bits, got, back, err)
		}
	})
}
