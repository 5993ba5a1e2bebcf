package main

import (
	"strings"
	"testing"
)

// The example against kfake on SQLite: the republished record has no
// second effect, and the second run reads nothing again.
func TestExample(t *testing.T) {
	var out strings.Builder
	if err := run(&out, "", ""); err != nil {
		t.Fatal(err)
	}
	want := "first run: 3 applied, 1 duplicate\nsecond run: 0 applied, 0 duplicate\ncredits: 3 rows, total 35\n"
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}
