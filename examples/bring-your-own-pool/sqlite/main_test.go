package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestBringYourOwnSQLiteDB: the committed order leaves its row, its record
// and its job; the retry adds nothing; the rolled-back order leaves none.
func TestBringYourOwnSQLiteDB(t *testing.T) {
	var out strings.Builder
	if err := run(t.Context(), filepath.Join(t.TempDir(), "shop.db"), &out); err != nil {
		t.Fatal(err)
	}
	want := `place order-1 (commit=true): ok
place order-1 (commit=true): already replay
place order-2 (commit=false): abandoned before commit
orders=1 records=1 jobs=1
`
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
}
