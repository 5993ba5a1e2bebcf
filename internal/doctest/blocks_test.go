package doctest

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// block is one fenced code block of a Markdown file.
type block struct {
	file  string   // relative to the module root, such as "docs/http.md"
	lang  string   // the fence's info string, such as "go" or "sh"
	line  int      // the line of the block's first content line, from 1
	lines []string // the content
	skip  string   // the reason of a "doctest: skip" marker, or ""
	given []string // the Go declarations of a "doctest: given" marker
	// givenLine is the line of the first declaration of given.
	givenLine int
}

// where names the block for a failure message.
func (b block) where() string {
	return b.file + ":" + strconv.Itoa(b.line)
}

var fence = regexp.MustCompile("^```\\s*([A-Za-z0-9_+-]*)\\s*$")

// parseBlocks returns the fenced blocks of the Markdown file data, named
// file. A "<!-- doctest: skip REASON -->" or "<!-- doctest: given DECLS -->"
// comment applies to the block whose fence follows it (blank lines
// between are allowed).
func parseBlocks(file string, data []byte) []block {
	var blocks []block
	var cur *block
	var marker []string // the lines of the last doctest comment
	markerLine := 0
	inMarker := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		text := sc.Text()
		switch {
		case cur != nil:
			if strings.TrimSpace(text) == "```" {
				blocks = append(blocks, *cur)
				cur = nil
				continue
			}
			cur.lines = append(cur.lines, text)
		case inMarker || strings.HasPrefix(strings.TrimSpace(text), "<!-- doctest:"):
			if !inMarker {
				marker, markerLine = nil, n
			}
			marker = append(marker, text)
			inMarker = !strings.Contains(text, "-->")
		case fence.MatchString(text):
			cur = &block{file: file, lang: fence.FindStringSubmatch(text)[1], line: n + 1}
			if marker != nil {
				applyMarker(cur, marker, markerLine)
			}
			marker = nil
		case strings.TrimSpace(text) != "":
			marker = nil // a marker applies only to the very next block
		}
	}
	return blocks
}

// applyMarker applies the doctest comment lines (starting at line n) to b.
func applyMarker(b *block, lines []string, n int) {
	text := strings.Join(lines, "\n")
	text = strings.TrimSpace(text)
	text = strings.TrimPrefix(text, "<!--")
	text = strings.TrimSuffix(text, "-->")
	text = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(text), "doctest:"))
	switch {
	case strings.HasPrefix(text, "skip"):
		b.skip = strings.Trim(strings.TrimSpace(strings.TrimPrefix(text, "skip")), "()")
		if b.skip == "" {
			b.skip = "(no reason given)"
		}
	case strings.HasPrefix(text, "given"):
		first := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(strings.TrimPrefix(lines[0], "<!--")), "doctest:"))
		first = strings.TrimSpace(strings.TrimPrefix(first, "given"))
		decls := append([]string{first}, lines[1:]...)
		last := len(decls) - 1
		decls[last] = strings.TrimSuffix(strings.TrimRight(decls[last], " "), "-->")
		b.given, b.givenLine = decls, n
	default:
		b.skip = "unknown doctest marker: " + text
	}
}

// docFiles returns README.md and docs/*.md, relative to the module root.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(moduleRoot(t), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{"README.md"}
	for _, f := range files {
		out = append(out, filepath.Join("docs", filepath.Base(f)))
	}
	return out
}

// allBlocks returns the blocks of every documentation file in language
// lang (several names allowed, such as "sh" and "bash").
func allBlocks(t *testing.T, langs ...string) []block {
	t.Helper()
	var out []block
	for _, f := range docFiles(t) {
		data, err := os.ReadFile(filepath.Join(moduleRoot(t), f))
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range parseBlocks(f, data) {
			for _, l := range langs {
				if b.lang == l {
					out = append(out, b)
				}
			}
		}
	}
	return out
}

var moduleRootOnce = sync.OnceValues(func() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", err
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
})

// moduleRoot returns the directory of this module's go.mod.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := moduleRootOnce()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	return root
}

func TestParseBlocks(t *testing.T) {
	t.Parallel()
	md := "# T\n\n```go\nx := 1\n```\n\n<!-- doctest: skip (a sketch) -->\n\n```sh\nidem x\n```\n```\nplain\n```\n" +
		"<!-- doctest: given var a int\nvar b string -->\n```go\n_ = a\n```\n<!-- doctest: skip -->\ntext\n```go\n```\n"
	got := parseBlocks("a.md", []byte(md))
	if len(got) != 5 {
		t.Fatalf("got %d blocks, want 5: %+v", len(got), got)
	}
	if b := got[3]; len(b.given) != 2 || b.given[0] != "var a int" || b.given[1] != "var b string " && b.given[1] != "var b string" || b.givenLine != 15 || b.line != 18 {
		t.Errorf("block 3 = %+v", b)
	}
	if b := got[4]; b.skip != "" {
		t.Errorf("a marker followed by text applies to no block; block 4 = %+v", b)
	}
	if b := got[0]; b.lang != "go" || b.line != 4 || len(b.lines) != 1 || b.lines[0] != "x := 1" || b.skip != "" {
		t.Errorf("block 0 = %+v", b)
	}
	if b := got[1]; b.lang != "sh" || b.line != 10 || b.skip != "a sketch" {
		t.Errorf("block 1 = %+v", b)
	}
	if b := got[2]; b.lang != "" || b.lines[0] != "plain" {
		t.Errorf("block 2 = %+v", b)
	}
}
