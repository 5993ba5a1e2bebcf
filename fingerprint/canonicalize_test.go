package fingerprint

import (
	"errors"
	"strings"
	"sync"
	"testing"
)

func TestCanonicalize(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		// RFC 8785, section 3.2.2, with one change: the RFC's input has
		// 333333333.33333329, a value that differs from the float64 it
		// reads as (333333333.3333333 is the shortest form of that
		// float64). RFC 8785 rounds it; idem keeps every number exact
		// (see number.go), so the example's input here writes the float64.
		{
			name: "rfc8785 example",
			in: `{
  "numbers": [333333333.3333333, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`,
			want: `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
		},
		{"rfc8785 example number kept exact", `333333333.33333329`, `333333333.33333329`},
		// RFC 8785, section 3.2.3: keys sort by UTF-16 code units, so the
		// surrogate pair of U+1F600 sorts before U+FB33.
		{
			name: "rfc8785 sorting",
			in: `{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`,
			want: "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"\u00f6\":\"Latin Small Letter O With Diaeresis\",\"\u20ac\":\"Euro Sign\",\"\U0001F600\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}",
		},
		{"brief example", `{"b":[1.0,2e21,"\u00e9"],"a":-0}`, `{"a":0,"b":[1,2e+21,"é"]}`},

		{"empty object", ` { } `, `{}`},
		{"empty array", "\t[ ]\r\n", `[]`},
		{"null", `null`, `null`},
		{"true", ` true`, `true`},
		{"false", `false `, `false`},
		{"nested", `{"z":{"b":[{"d":1,"c":2}],"a":null},"y":[]}`, `{"y":[],"z":{"a":null,"b":[{"c":2,"d":1}]}}`},
		{"prefix key first", `{"ab":1,"a":2,"":3}`, `{"":3,"a":2,"ab":1}`},
		{"array order kept", `[3,1,2]`, `[3,1,2]`},
		{"escaped key sorts decoded", `{"\u0062":1,"a":2}`, `{"a":2,"b":1}`},
		{"above U+FFFF before U+E000", `{"\uffff":1,"\ud800\udc00":2,"\ue000":3,"\ud7ff":4}`, "{\"\ud7ff\":4,\"\U00010000\":2,\"\ue000\":3,\"\uffff\":1}"},

		{"number 1.0", `1.0`, `1`},
		{"number 4.50", `4.50`, `4.5`},
		{"number -0", `-0`, `0`},
		{"number -0.0", `-0.0e5`, `0`},
		{"number 1e-6", `0.000001`, `0.000001`},
		{"number 1e-7", `1e-7`, `1e-7`},
		{"number 1E21", `1E21`, `1e+21`},
		{"number 2e21", `2e21`, `2e+21`},
		{"number below 1e21", `123456789012345680000`, `123456789012345680000`},
		{"number 1e2", `1e2`, `100`},
		{"number 10e-1", `10e-1`, `1`},
		{"number 0.1", `0.1`, `0.1`},
		{"number -1.5e300", `-1.5E+300`, `-1.5e+300`},
		{"number 1e23 is its float64's form", `1e23`, `1e+23`},
		{"number 0.1 is its float64's form", `0.10`, `0.1`},
		{"number 2^53", `9007199254740992`, `9007199254740992`},
		{"number 17 digits shortest", `0.30000000000000004`, `0.30000000000000004`},

		// Numbers whose float64 does not print as their value are kept as
		// their exact decimal, in the same layout (issue 10, item 6).
		{"exact 2^53+1", `9007199254740993`, `9007199254740993`},
		{"exact 2^53+1 with fraction", `9007199254740993.000`, `9007199254740993`},
		{"exact 2^53+1 with exponent", `90071992547409930e-1`, `9007199254740993`},
		{"exact negative", `-9007199254740993`, `-9007199254740993`},
		{"exact 2^60, which RFC 8785 prints rounded", `1152921504606846976`, `1152921504606846976`},
		{"exact 21 digits", `123456789012345678901`, `123456789012345678901`},
		{"exact 22 digits", `1234567890123456789012`, `1.234567890123456789012e+21`},
		{"exact many digits", `3.141592653589793238462643383279`, `3.141592653589793238462643383279`},
		{"exact 0.1 plus", `0.10000000000000001`, `0.10000000000000001`},
		{"exact float64 0.1 written out", `0.1000000000000000055511151231257827021181583404541015625`, `0.1000000000000000055511151231257827021181583404541015625`},
		{"exact small fraction", `0.0000012345678901234567`, `0.0000012345678901234567`},
		{"exact tiny", `1.2345678901234567e-7`, `1.2345678901234567e-7`},
		{"exact underflow", `1e-400`, `1e-400`},
		{"exact below smallest subnormal", `2e-324`, `2e-324`},
		{"exact near smallest subnormal", `4.9e-324`, `4.9e-324`},
		{"smallest subnormal", `5e-324`, `5e-324`},
		{"exact overflow", `1e400`, `1e+400`},
		{"exact overflow negative", `[0,-1e309]`, `[0,-1e+309]`},
		{"exact just above max", `1.7976931348623159e308`, `1.7976931348623159e+308`},
		{"max float64", `1.7976931348623157e308`, `1.7976931348623157e+308`},
		{"exact huge exponent", `-12.50e+0000123456789012345678901234`, `-1.25e+123456789012345678901235`},
		{"exact huge negative exponent", `0.012e-123456789012345678901234`, `1.2e-123456789012345678901236`},
		{"zero with huge exponent", `-0.000e999999999999999999999`, `0`},
		{"exact in nested value", `{"to_account":9007199254740993,"a":[1e400]}`, `{"a":[1e+400],"to_account":9007199254740993}`},

		{"string control escapes", `"\u0000\u0008\u0009\u000a\u000b\u000c\u000d\u001f\u0020"`, `"\u0000\b\t\n\u000b\f\r\u001f "`},
		{"string solidus unescaped", `"\/a/b"`, `"/a/b"`},
		{"string DEL raw", `"\u007f"`, "\"\x7f\""},
		{"string U+2028 raw", `"\u2028\u2029"`, "\"\u2028\u2029\""},
		{"string html raw", `"\u003c\u003e\u0026<>&"`, `"<>&<>&"`},
		{"string quote and backslash", `"\"\\"`, `"\"\\"`},
		{"string uppercase hex escape", `"\u00E9\u00e9é"`, `"ééé"`},
		{"string surrogate pair", `"\uD83D\uDE00"`, `"😀"`},
		{"string raw non-BMP", `"😀"`, `"😀"`},
		{"string raw U+FFFD", "\"\uFFFD\"", "\"\uFFFD\""},
		{"string noncharacter", `"\uffff"`, "\"\uffff\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Canonicalize([]byte(tt.in))
			if err != nil {
				t.Fatalf("Canonicalize(%q) error: %v", tt.in, err)
			}
			if string(got) != tt.want {
				t.Errorf("Canonicalize(%q)\n got %s\nwant %s", tt.in, got, tt.want)
			}
			again, err := Canonicalize(got)
			if err != nil || string(again) != string(got) {
				t.Errorf("Canonicalize(canonical) = %s, %v; want it unchanged", again, err)
			}
		})
	}
}

func TestCanonicalizeErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		in     string
		offset int64
		msg    string // substring of SyntaxError.Msg
	}{
		{"empty", ``, 0, "empty input"},
		{"only space", "  \n", 3, "unexpected end of input, expected a JSON value"},
		{"duplicate key", `{"a":1,"a":2}`, 7, `duplicate key "a"`},
		{"duplicate key by escape", `{"a":1,"\u0061":2}`, 7, `duplicate key "a"`},
		{"duplicate key nested", `{"x":{"k":1,"j":2,"k":3}}`, 18, `duplicate key "k"`},
		{"duplicate key in large object", `{"a":0,"b":0,"c":0,"d":0,"e":0,"f":0,"g":0,"h":0,"i":0,"j":0,"k":0,"l":0,"m":0,"n":0,"o":0,"p":0,"q":0,"r":0,"a":1}`, 109, `duplicate key "a"`},
		{"invalid UTF-8 in string", "\"a\xffb\"", 2, "invalid UTF-8"},
		{"invalid UTF-8 outside string", "[\xff]", 1, "invalid UTF-8"},
		{"encoded surrogate", "\"\xed\xa0\x80\"", 1, "invalid UTF-8"},
		{"overlong encoding", "\"\xc0\xaf\"", 1, "invalid UTF-8"},
		{"lone high surrogate", `"x\ud800"`, 2, "lone surrogate"},
		{"high surrogate then char", `"\ud800x"`, 1, "lone surrogate"},
		{"high surrogate then non-low escape", `"\ud800\u0041"`, 1, "lone surrogate"},
		{"two high surrogates", `"\ud800\ud800"`, 1, "lone surrogate"},
		{"lone low surrogate", `"\udc00"`, 1, "lone surrogate"},
		{"lone surrogate in key", `{"\udfff":1}`, 2, "lone surrogate"},
		{"NaN", `NaN`, 0, "invalid character 'N'"},
		{"Infinity", `-Infinity`, 1, "expected digit"},
		{"trailing value", `{} x`, 3, "after top-level value"},
		{"two values", `{}{}`, 2, "after top-level value"},
		{"two numbers", `1 2`, 2, "after top-level value"},
		{"trailing comma in array", `[1,]`, 3, "expected a JSON value"},
		{"trailing comma in object", `{"a":1,}`, 7, "expected a string for an object key"},
		{"missing colon", `{"a" 1}`, 5, "expected ':'"},
		{"unquoted key", `{a:1}`, 1, "expected a string for an object key"},
		{"missing comma", `[1 2]`, 3, "expected ',' or ']'"},
		{"missing comma in object", `{"a":1 "b":2}`, 7, "expected ',' or '}'"},
		{"unclosed array", `[1`, 2, "unexpected end of input"},
		{"unclosed object", `{"a":1`, 6, "unexpected end of input"},
		{"truncated literal", `tru`, 3, "unexpected end of input"},
		{"wrong literal", `nul1`, 3, "in literal null"},
		{"capitalized literal", `True`, 0, "invalid character 'T'"},
		{"leading zero", `01`, 0, "leading zero"},
		{"negative leading zero", `-01`, 0, "leading zero"},
		{"minus alone", `-`, 1, "expected digit"},
		{"no fraction digits", `1.`, 2, "digit after decimal point"},
		{"no exponent digits", `1e+`, 3, "digit in exponent"},
		{"leading dot", `.5`, 0, "invalid character '.'"},
		{"plus sign", `+1`, 0, "invalid character '+'"},
		{"hex number", `0x10`, 1, "after top-level value"},
		{"unterminated string", `"abc`, 4, "unexpected end of input in string starting at offset 0"},
		{"raw tab in string", "\"a\tb\"", 2, "invalid control character U+0009"},
		{"raw newline in string", "\"a\nb\"", 2, "invalid control character U+000A"},
		{"bad escape", `"\x"`, 1, "invalid escape sequence `\\x`"},
		{"short unicode escape", `"\u12"`, 1, "four hex digits"},
		{"single quotes", `'a'`, 0, "invalid character '\\''"},
		{"byte order mark", "\ufeff{}", 0, "invalid character '\\ufeff'"},
		{"comment", `{} // x`, 3, "after top-level value"},
		{"vertical tab is not space", "\v1", 0, "invalid character '\\v'"},
		{"NUL byte", "1\x00", 1, "after top-level value"},
		{"too deep", strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1), maxDepth, "nesting deeper than 10000 levels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Canonicalize([]byte(tt.in))
			if err == nil {
				t.Fatalf("Canonicalize(%q) = %s, want an error", tt.in, got)
			}
			se, ok := errors.AsType[*SyntaxError](err)
			if !ok {
				t.Fatalf("Canonicalize(%q) error %T %v, want *SyntaxError", tt.in, err, err)
			}
			if se.Offset != tt.offset || !strings.Contains(se.Msg, tt.msg) {
				t.Errorf("Canonicalize(%q) error at offset %d: %q\nwant offset %d, message containing %q", tt.in, se.Offset, se.Msg, tt.offset, tt.msg)
			}
		})
	}
}

func TestCanonicalizeMaxDepth(t *testing.T) {
	t.Parallel()
	in := strings.Repeat(`{"a":[`, maxDepth/2) + strings.Repeat("]}", maxDepth/2)
	if _, err := Canonicalize([]byte(in)); err != nil {
		t.Fatalf("nesting of exactly %d levels: %v", maxDepth, err)
	}
}

func TestSyntaxErrorMessage(t *testing.T) {
	t.Parallel()
	_, err := Canonicalize([]byte(`{"a":1,"b":2,"a":3}`))
	const want = `fingerprint: invalid JSON at offset 13: duplicate key "a"`
	if err == nil || err.Error() != want {
		t.Errorf("error = %v, want %s", err, want)
	}
}

func TestSyntaxErrorPosition(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in           string
		line, column int
	}{
		{`{"a":1,"a":2}`, 1, 8},
		{"{\n  \"a\": 1,\n  \"a\": 2\n}", 3, 3},
		{"[\"é€😀\", x]", 1, 9}, // column counts characters, not bytes
		{"[1,\r\n2,]", 2, 3},
		{"[1,\n", 2, 1},
	}
	for _, tt := range tests {
		_, err := Canonicalize([]byte(tt.in))
		se, ok := errors.AsType[*SyntaxError](err)
		if !ok {
			t.Fatalf("Canonicalize(%q) error = %v, want *SyntaxError", tt.in, err)
		}
		if se.Line != tt.line || se.Column != tt.column {
			t.Errorf("Canonicalize(%q): line %d column %d, want %d:%d (%v)", tt.in, se.Line, se.Column, tt.line, tt.column, err)
		}
	}
}

func TestCanonicalizeDoesNotModifyInput(t *testing.T) {
	t.Parallel()
	in := []byte(`{"b":" x ","a":[2,1]}`)
	orig := string(in)
	if _, err := Canonicalize(in, CollapseSpace(), Exclude("/a/0")); err != nil {
		t.Fatal(err)
	}
	if string(in) != orig {
		t.Errorf("input changed to %s", in)
	}
}

// Parsers are reused: a parse that fails half way through nested values
// leaves nothing behind for the next, on any goroutine.
func TestParserReuse(t *testing.T) {
	bad := []string{`{"a":[1,2,{"b":`, `[[[{"x":1,"y":[true,`, `{"a":1,"a":2}`, `[1,2,3,}`}
	const good, want = `{"z":[3,{"q":1,"p":2}],"a":"x"}`, `{"a":"x","z":[3,{"p":2,"q":1}]}`
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for i := range 200 {
				if _, err := Canonicalize([]byte(bad[i%len(bad)])); err == nil {
					t.Errorf("%s: no error", bad[i%len(bad)])
					return
				}
				if got, err := Canonicalize([]byte(good)); err != nil || string(got) != want {
					t.Errorf("after %s: %s, %v; want %s", bad[i%len(bad)], got, err, want)
					return
				}
			}
		})
	}
	wg.Wait()
}
