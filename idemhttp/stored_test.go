package idemhttp

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
)

// marshalMeta is what storedResult did before appendMeta: the filtered
// header in a map, and json.Marshal. Names that canonicalize alike are
// left out of its inputs (the map made one of them win at random).
func marshalMeta(t testing.TB, h http.Header, notStored string) []byte {
	t.Helper()
	m := storedMeta{V: 1, Header: h, NotStored: notStored}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// hostile are header values a handler (or an upstream, through the proxy)
// may send: every escaping rule encoding/json has.
var hostile = []string{
	"", "plain", `quote " and \ backslash`, "<script>alert(1)</script> & co",
	"ctl \x00\x01\x1f\x7f \b\f\n\r\t", "bad utf-8 \xff\xfe \xc3 \xe2\x82", "sep \u2028 \u2029",
	"multi byte é 中文 😀", "\xed\xa0\x80 surrogate", "/json \u003c", "a\x00",
}

func TestStoredResultMatchesJSON(t *testing.T) {
	cfg, err := newConfig(&Options{AllowHeaders: []string{"X-Hostile", "<Odd>", "x-lower"}})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range hostile {
		h := http.Header{
			"Content-Type":     {v, "second " + v},
			"X-Hostile":        {v},
			"x-lower":          {v}, // stored under its canonical name
			"<Odd>":            {v},
			"Set-Cookie":       {"secret=1"}, // never stored
			"X-Not-Allowed":    {v},
			"Content-Encoding": nil, // kept, as null
			"Location":         {},
		}
		want := http.Header{"Content-Type": h["Content-Type"], "X-Hostile": {v}, "X-Lower": {v}, "<Odd>": {v},
			"Content-Encoding": nil, "Location": {}}
		res := cfg.storedResult(201, h, []byte("body"))
		if exp := marshalMeta(t, want, ""); !bytes.Equal(res.Meta, exp) {
			t.Errorf("value %d: meta\n%s\nwant (json.Marshal)\n%s", i, res.Meta, exp)
		}
		if res.Status != 201 || string(res.Body) != "body" {
			t.Errorf("value %d: status %d body %q", i, res.Status, res.Body)
		}
		if got, exp := notStoredResult(200, v).Meta, marshalMeta(t, nil, v); !bytes.Equal(got, exp) {
			t.Errorf("value %d: not-stored meta %s, want %s", i, got, exp)
		}
	}
	// Nothing allowed: no "h" at all, as omitempty left it out.
	if res := cfg.storedResult(200, http.Header{"Set-Cookie": {"a=b"}}, nil); string(res.Meta) != `{"v":1}` {
		t.Errorf("meta without allowed headers: %s", res.Meta)
	}
}

// Two spellings of one name are one stored header, the canonical one's.
func TestStoredResultDuplicateNames(t *testing.T) {
	cfg, err := newConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 { // map order varies
		h := http.Header{"content-type": {"a"}, "Content-Type": {"b"}, "CONTENT-TYPE": {"c"}, "location": {"/x"}}
		res := cfg.storedResult(200, h, nil)
		if want := `{"v":1,"h":{"Content-Type":["b"],"Location":["/x"]}}`; string(res.Meta) != want {
			t.Fatalf("meta %s, want %s", res.Meta, want)
		}
	}
}

func TestStoredResultAllocs(t *testing.T) {
	cfg, err := newConfig(nil)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{"Content-Type": {"application/json"}, "Location": {"/charges/ch_1"}, "X-Other": {"x"}}
	if n := testing.AllocsPerRun(100, func() { cfg.storedResult(201, h, nil) }); n > 1 {
		t.Errorf("storedResult: %v allocations, want the meta's one", n)
	}
}

func FuzzAppendMeta(f *testing.F) {
	for _, v := range hostile {
		f.Add("X-Name", v, v, "Content-Type", v, "")
	}
	f.Add("a", "", "", "b", "x", "too-large")
	f.Fuzz(func(t *testing.T, n1, v1, v2, n2, v3, notStored string) {
		var hs []metaHeader
		want := http.Header{}
		for _, e := range []metaHeader{{name: n1, vals: []string{v1, v2}}, {name: n2, vals: []string{v3}}} {
			if _, dup := want[e.name]; dup {
				continue
			}
			e.raw = e.name
			hs = append(hs, e)
			want[e.name] = e.vals
		}
		if got, exp := appendMeta(nil, hs, notStored), marshalMeta(t, want, notStored); !bytes.Equal(got, exp) {
			t.Fatalf("appendMeta\n%q\njson.Marshal\n%q", got, exp)
		}
	})
}
