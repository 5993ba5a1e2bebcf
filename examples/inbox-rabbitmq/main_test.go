package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/idemdev/idem/internal/brokertest"
)

func TestMain(m *testing.M) { brokertest.Main(m) }

func TestRun(t *testing.T) {
	srv := brokertest.Shared(t, brokertest.RabbitMQ)
	var out bytes.Buffer
	if err := run(context.Background(), srv.URL(), &out); err != nil {
		t.Fatal(err)
	}
	want := "payments: 5 applied, 1 duplicates, 1 dead-lettered\ncredits: 5, in payments.dead: 1\n"
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
}
