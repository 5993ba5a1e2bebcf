package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/idemdev/idem/internal/brokertest"
)

func TestMain(m *testing.M) { brokertest.Main(m) }

func TestRun(t *testing.T) {
	srv := brokertest.Shared(t, brokertest.NATS)
	var out bytes.Buffer
	if err := run(context.Background(), srv.URL(), &out); err != nil {
		t.Fatal(err)
	}
	want := "billing: 5 applied, 0 duplicates\nbilling-replay: 0 applied, 5 duplicates\ncredits: 5\n"
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
}
