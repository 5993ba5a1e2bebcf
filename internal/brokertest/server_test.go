package brokertest

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Kill returns only once the broker's processes are gone (rabbitmq-server
// is a script whose VM outlives it for a while: its port stayed taken),
// and Start only once the broker serves clients (it returned while the
// dying VM still accepted on the port, before the new one had booted).
func TestRabbitMQRestartIsReady(t *testing.T) {
	Skip(t, RabbitMQ)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s, err := Start(ctx, RabbitMQ, "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 3 {
		s.Kill()
		if s.Running() {
			t.Fatal("running after Kill")
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)))
		if err != nil {
			t.Fatalf("the port is still taken after Kill: %v", err)
		}
		l.Close()
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		conn, err := amqp.Dial(s.URL())
		if err != nil {
			t.Fatalf("no AMQP connection right after Start: %v; log:\n%s", err, s.LogTail(20))
		}
		conn.Close()
		if !s.Running() {
			t.Fatal("not running after Start")
		}
	}
}

func TestProcField(t *testing.T) {
	stat := []byte("123 (a) b (c)) S 1 456 456 0 -1")
	if got := procField(stat, 0); got != "S" {
		t.Errorf("state %q", got)
	}
	if got := procField(stat, 2); got != "456" {
		t.Errorf("pgrp %q", got)
	}
}
