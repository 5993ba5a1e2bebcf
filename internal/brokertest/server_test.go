package brokertest

import (
	"context"
	"net"
	"os"
	"path/filepath"
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
	ctx, s := startRabbit(t)
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

// startRabbit starts a RabbitMQ of the test's own (or skips, as Skip
// does), closed at the end of the test; ctx bounds the test's waits.
func startRabbit(t *testing.T) (context.Context, *Server) {
	t.Helper()
	Skip(t, RabbitMQ)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	s, err := Start(ctx, RabbitMQ, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return ctx, s
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

// The ports still held when the broker starts again (by a VM stuck while
// dying: a listener that accepts and never answers, and the distribution
// port): the new VM cannot boot and exits, and Start must say so rather
// than take the old listener's accept for readiness (which left the
// broker down for good, and its consumers waiting, with Start's nil).
func TestRabbitMQStartSeesAFailedBoot(t *testing.T) {
	ctx, s := startRabbit(t)
	s.Kill()
	amqpPort, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		var held []net.Conn // accepted, never answered
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := amqpPort.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	distPort, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.distPort)))
	if err != nil {
		amqpPort.Close()
		t.Fatal(err)
	}
	err = s.Start(ctx)
	amqpPort.Close()
	distPort.Close()
	if err == nil || s.Running() {
		t.Fatalf("Start = %v, running %v, with the broker's ports held; want its failure", err, s.Running())
	}
	if err := s.Start(ctx); err != nil {
		t.Fatalf("once the ports are free: %v", err)
	}
}

// ClassicRecoveries reads RabbitMQ's own account of the classic queues
// each boot recovered: the second boot here lost the queue the first
// one's clients declared.
func TestClassicRecoveries(t *testing.T) {
	t.Parallel()
	s := &Server{dir: t.TempDir()}
	if boots, _ := s.ClassicRecoveries(); boots != 0 {
		t.Fatalf("no log: %d boots", boots)
	}
	log := `2026-12-03 19:25:01.1+00:00 [info] <0.611.0> Recovering 0 queues of type rabbit_classic_queue took 2ms
2026-12-03 19:25:01.1+00:00 [info] <0.611.0> Recovering 0 queues of type rabbit_quorum_queue took 0ms
2026-12-03 19:25:09.2+00:00 [info] <0.611.0> Recovering 1 queues of type rabbit_classic_queue took 3ms
2026-12-03 19:25:18.2+00:00 [info] <0.611.0> Recovering 0 queues of type rabbit_classic_queue took 3ms
2026-12-03 19:25:18.2+00:00 [info] <0.611.0> Recovering 2 queues of type rabbit_stream_queue took 0ms
`
	if err := os.WriteFile(filepath.Join(s.dir, "server.log"), []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	if boots, last := s.ClassicRecoveries(); boots != 3 || last != 0 {
		t.Fatalf("%d boots, last recovered %d; want 3 and 0", boots, last)
	}
}
