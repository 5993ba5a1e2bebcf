package fingerprint

import (
	"errors"
	"strings"
	"testing"
)

func TestExclude(t *testing.T) {
	t.Parallel()
	const doc = `{"params":{"request_id":"r-1","amount":5,"at":"2024"},"items":[{"id":1,"n":"a"},{"id":2,"n":"b"}],"a/b":1,"m~n":2,"":3}`
	tests := []struct {
		name     string
		pointers []string
		want     string
	}{
		{"none", nil, `{"":3,"a/b":1,"items":[{"id":1,"n":"a"},{"id":2,"n":"b"}],"m~n":2,"params":{"amount":5,"at":"2024","request_id":"r-1"}}`},
		{"nested member", []string{"/params/request_id"}, `{"":3,"a/b":1,"items":[{"id":1,"n":"a"},{"id":2,"n":"b"}],"m~n":2,"params":{"amount":5,"at":"2024"}}`},
		{"two members", []string{"/params/request_id", "/params/at"}, `{"":3,"a/b":1,"items":[{"id":1,"n":"a"},{"id":2,"n":"b"}],"m~n":2,"params":{"amount":5}}`},
		{"whole subtree", []string{"/params"}, `{"":3,"a/b":1,"items":[{"id":1,"n":"a"},{"id":2,"n":"b"}],"m~n":2}`},
		{"array element", []string{"/items/0"}, `{"":3,"a/b":1,"items":[{"id":2,"n":"b"}],"m~n":2,"params":{"amount":5,"at":"2024","request_id":"r-1"}}`},
		{"array elements by input index", []string{"/items/1", "/items/0"}, `{"":3,"a/b":1,"items":[],"m~n":2,"params":{"amount":5,"at":"2024","request_id":"r-1"}}`},
		{"wildcard over array", []string{"/items/*/id"}, `{"":3,"a/b":1,"items":[{"n":"a"},{"n":"b"}],"m~n":2,"params":{"amount":5,"at":"2024","request_id":"r-1"}}`},
		{"wildcard over object", []string{"/*/request_id", "/*/n"}, `{"":3,"a/b":1,"items":[{"id":1,"n":"a"},{"id":2,"n":"b"}],"m~n":2,"params":{"amount":5,"at":"2024"}}`},
		{"wildcard leaf", []string{"/params/*"}, `{"":3,"a/b":1,"items":[{"id":1,"n":"a"},{"id":2,"n":"b"}],"m~n":2,"params":{}}`},
		{"escaped slash", []string{"/a~1b"}, `{"":3,"items":[{"id":1,"n":"a"},{"id":2,"n":"b"}],"m~n":2,"params":{"amount":5,"at":"2024","request_id":"r-1"}}`},
		{"escaped tilde", []string{"/m~0n"}, `{"":3,"a/b":1,"items":[{"id":1,"n":"a"},{"id":2,"n":"b"}],"params":{"amount":5,"at":"2024","request_id":"r-1"}}`},
		{"empty key", []string{"/"}, `{"a/b":1,"items":[{"id":1,"n":"a"},{"id":2,"n":"b"}],"m~n":2,"params":{"amount":5,"at":"2024","request_id":"r-1"}}`},
		{"missing member", []string{"/params/nope", "/nope/deeper"}, `{"":3,"a/b":1,"items":[{"id":1,"n":"a"},{"id":2,"n":"b"}],"m~n":2,"params":{"amount":5,"at":"2024","request_id":"r-1"}}`},
		{"index out of range", []string{"/items/7", "/items/-"}, `{"":3,"a/b":1,"items":[{"id":1,"n":"a"},{"id":2,"n":"b"}],"m~n":2,"params":{"amount":5,"at":"2024","request_id":"r-1"}}`},
		{"leading zero is not an index", []string{"/items/00"}, `{"":3,"a/b":1,"items":[{"id":1,"n":"a"},{"id":2,"n":"b"}],"m~n":2,"params":{"amount":5,"at":"2024","request_id":"r-1"}}`},
		{"through a scalar", []string{"/params/amount/x"}, `{"":3,"a/b":1,"items":[{"id":1,"n":"a"},{"id":2,"n":"b"}],"m~n":2,"params":{"amount":5,"at":"2024","request_id":"r-1"}}`},
		{"member name on array", []string{"/items/id"}, `{"":3,"a/b":1,"items":[{"id":1,"n":"a"},{"id":2,"n":"b"}],"m~n":2,"params":{"amount":5,"at":"2024","request_id":"r-1"}}`},
		{"everything at top", []string{"/*"}, `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var opts []Option
			for _, p := range tt.pointers {
				opts = append(opts, Exclude(p))
			}
			got, err := Canonicalize([]byte(doc), opts...)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("Exclude %q\n got %s\nwant %s", tt.pointers, got, tt.want)
			}
		})
	}
}

func TestExcludeNumericMemberName(t *testing.T) {
	t.Parallel()
	got, err := Canonicalize([]byte(`{"0":"a","1":"b","*":"c"}`), Exclude("/0"))
	if err != nil || string(got) != `{"*":"c","1":"b"}` {
		t.Errorf("got %s, %v", got, err)
	}
	got, err = Canonicalize([]byte(`[{"a":1},{"a":2}]`), Exclude("/1/a"))
	if err != nil || string(got) != `[{"a":1},{}]` {
		t.Errorf("got %s, %v", got, err)
	}
	got, err = Canonicalize([]byte(`"scalar"`), Exclude("/x"))
	if err != nil || string(got) != `"scalar"` {
		t.Errorf("got %s, %v", got, err)
	}
}

func TestExcludeInvalidPointer(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", "params", "#/params", "/a~", "/a~2", "/~x/b"} {
		_, err := Canonicalize([]byte(`{}`), Exclude(p))
		if !errors.Is(err, ErrInvalidPointer) {
			t.Errorf("Exclude(%q): error %v, want ErrInvalidPointer", p, err)
			continue
		}
		if !strings.Contains(err.Error(), `"`+p+`"`) {
			t.Errorf("Exclude(%q): error %q does not name the pointer", p, err)
		}
	}
	// The pointer is checked even when the input is invalid too.
	if _, err := Sum([]byte(`{`), Exclude("x")); !errors.Is(err, ErrInvalidPointer) {
		t.Errorf("Sum with bad pointer and bad input: %v, want ErrInvalidPointer", err)
	}
}

func TestNormalizers(t *testing.T) {
	t.Parallel()
	const (
		decomposed = "e\u0301"         // e + combining acute
		composed   = "\u00e9"          // é
		spaces     = "\u00a0\\t\u3000" // NBSP, an escaped tab, ideographic space
	)
	tests := []struct {
		name string
		in   string
		opts []Option
		want string
	}{
		{"none", `{"k":"  a  b  "}`, nil, `{"k":"  a  b  "}`},
		{"trim", `{"k":" a  b\n"," k ":"\t"}`, []Option{TrimSpace()}, `{" k ":"","k":"a  b"}`},
		{"trim unicode space", `["` + spaces + `x` + spaces + `"]`, []Option{TrimSpace()}, `["x"]`},
		{"collapse", `{"k":"  a \t\n b  c "}`, []Option{CollapseSpace()}, `{"k":"a b c"}`},
		{"collapse unicode space", `["a` + spaces + `b"]`, []Option{CollapseSpace()}, `["a b"]`},
		{"collapse wins over trim", `["  a  b  "]`, []Option{TrimSpace(), CollapseSpace()}, `["a b"]`},
		{"collapse leaves keys", `{" a  b ":1}`, []Option{CollapseSpace()}, `{" a  b ":1}`},
		{"normalizers leave numbers", `[1.50," 1.50 "]`, []Option{CollapseSpace()}, `[1.5,"1.50"]`},
		{"nfc values", `["` + decomposed + `"]`, []Option{NFC()}, `["` + composed + `"]`},
		{"nfc keys", `{"` + decomposed + `":1}`, []Option{NFC()}, `{"` + composed + `":1}`},
		{"nfc keys sort after normalization", `{"e\u0301":1,"f":2,"d":3}`, []Option{NFC()}, `{"d":3,"f":2,"` + composed + `":1}`},
		{"no nfc without option", `["` + decomposed + `"]`, nil, `["` + decomposed + `"]`},
		{"nfc and collapse", `["  ` + decomposed + "\u2003 x" + `  "]`, []Option{NFC(), CollapseSpace()}, `["` + composed + ` x"]`},
		{"nfc nested", `{"a":[{"b":"` + decomposed + `"}]}`, []Option{NFC()}, `{"a":[{"b":"` + composed + `"}]}`},
		{"nfc exclude by composed pointer", `{"` + decomposed + `":1,"x":2}`, []Option{NFC(), Exclude("/" + composed)}, `{"x":2}`},
		{"nfc exclude by decomposed pointer", `{"` + composed + `":1,"x":2}`, []Option{NFC(), Exclude("/" + decomposed)}, `{"x":2}`},
		{"exclude without nfc is exact", `{"` + composed + `":1}`, []Option{Exclude("/" + decomposed)}, `{"` + composed + `":1}`},
		{"nil option ignored", `[" a "]`, []Option{nil, TrimSpace()}, `["a"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Canonicalize([]byte(tt.in), tt.opts...)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("Canonicalize(%q)\n got %s\nwant %s", tt.in, got, tt.want)
			}
			again, err := Canonicalize(got, tt.opts...)
			if err != nil || string(again) != string(got) {
				t.Errorf("second pass = %s, %v; want it unchanged", again, err)
			}
		})
	}
}

func TestNFCDuplicateKey(t *testing.T) {
	t.Parallel()
	in := []byte(`{"é":1,"e` + "\u0301" + `":2}`)
	if _, err := Canonicalize(in); err != nil {
		t.Fatalf("without NFC the keys differ: %v", err)
	}
	for _, opts := range [][]Option{{NFC()}, {NFC(), Exclude("/é")}} {
		_, err := Canonicalize(in, opts...)
		se, ok := errors.AsType[*SyntaxError](err)
		if !ok {
			t.Fatalf("error = %v, want *SyntaxError", err)
		}
		if se.Offset != 8 || !strings.Contains(se.Msg, `duplicate key "é" after NFC normalization`) {
			t.Errorf("error = %v (offset %d)", err, se.Offset)
		}
	}
}
