// Package brokertest starts real message brokers (nats-server with
// JetStream, rabbitmq-server) on loopback, in a directory of their own, on
// free ports, for tests and for idem prove. The binaries come from the
// system (Debian's nats-server and rabbitmq-server packages).
package brokertest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Kinds of broker.
const (
	NATS     = "nats"
	RabbitMQ = "rabbitmq"
)

// Available returns the path of the broker's server binary, if installed.
func Available(kind string) (string, bool) {
	var cands []string
	switch kind {
	case NATS:
		cands = []string{"nats-server"}
	case RabbitMQ:
		// The /usr/sbin wrapper switches to the rabbitmq user; the script
		// under /usr/lib runs as whoever calls it.
		cands = []string{"/usr/lib/rabbitmq/bin/rabbitmq-server", "rabbitmq-server"}
	}
	for _, c := range cands {
		if p, err := exec.LookPath(c); err == nil {
			return p, true
		}
	}
	return "", false
}

// Server is one broker process, restartable on the same port and data.
type Server struct {
	kind, bin, dir string
	port           int
	epmd           *exec.Cmd // RabbitMQ: a private Erlang port mapper
	epmdPort       int
	distPort       int
	node           string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
	log    *os.File
}

// Start starts a broker of kind with its data in a new directory under dir
// (os.TempDir() if empty) and waits until it accepts connections.
func Start(ctx context.Context, kind, dir string) (*Server, error) {
	bin, ok := Available(kind)
	if !ok {
		return nil, fmt.Errorf("brokertest: no %s server binary installed", kind)
	}
	d, err := os.MkdirTemp(dir, "idem-"+kind+"-")
	if err != nil {
		return nil, err
	}
	s := &Server{kind: kind, bin: bin, dir: d}
	if s.port, err = freePort(); err != nil {
		return nil, err
	}
	if kind == RabbitMQ {
		if s.epmdPort, err = freePort(); err != nil {
			return nil, err
		}
		if s.distPort, err = freePort(); err != nil {
			return nil, err
		}
		s.node = fmt.Sprintf("idem%d_%d@localhost", os.Getpid(), s.port)
		s.epmd = exec.Command("epmd", "-port", strconv.Itoa(s.epmdPort), "-address", "127.0.0.1")
		s.epmd.SysProcAttr = childAttr()
		if err := s.epmd.Start(); err != nil {
			return nil, fmt.Errorf("brokertest: start epmd: %w", err)
		}
	}
	if err := s.Start(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// Kind is NATS or RabbitMQ.
func (s *Server) Kind() string { return s.kind }

// URL is the client URL (nats://… or amqp://guest:guest@…).
func (s *Server) URL() string {
	if s.kind == RabbitMQ {
		return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", s.port)
	}
	return fmt.Sprintf("nats://127.0.0.1:%d", s.port)
}

// Start starts the server again after Stop or Kill (a no-op if running),
// on the same port and data, and waits until it is ready: for RabbitMQ,
// until an AMQP connection and a channel open (it accepts TCP connections
// before that, and the port may still be held by the process Kill ended).
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return nil
	}
	log, err := os.OpenFile(filepath.Join(s.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	var cmd *exec.Cmd
	switch s.kind {
	case NATS:
		cmd = exec.Command(s.bin, "-js", "-sd", filepath.Join(s.dir, "js"), "-a", "127.0.0.1", "-p", strconv.Itoa(s.port))
	case RabbitMQ:
		cmd = exec.Command(s.bin)
		cmd.Env = append(os.Environ(),
			"HOME="+s.dir,
			"RABBITMQ_NODENAME="+s.node,
			"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
			"RABBITMQ_NODE_PORT="+strconv.Itoa(s.port),
			"RABBITMQ_DIST_PORT="+strconv.Itoa(s.distPort),
			"ERL_EPMD_PORT="+strconv.Itoa(s.epmdPort),
			"RABBITMQ_MNESIA_BASE="+filepath.Join(s.dir, "mnesia"),
			"RABBITMQ_LOG_BASE="+filepath.Join(s.dir, "log"),
			"RABBITMQ_LOGS=-",
			"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(s.dir, "enabled_plugins"),
			"RABBITMQ_PLUGINS_EXPAND_DIR="+filepath.Join(s.dir, "plugins"),
			"RABBITMQ_CONFIG_FILE="+filepath.Join(s.dir, "rabbitmq"),
			"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(s.dir, "advanced.config"),
		)
	}
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("brokertest: start %s: %w", s.kind, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	s.cmd, s.exited, s.log = cmd, exited, log
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var last error
	for {
		if last = s.ready(); last == nil {
			return nil
		}
		select {
		case <-exited:
			s.stopLocked(syscall.SIGKILL) // its helpers
			return fmt.Errorf("brokertest: %s exited while starting; log:\n%s", s.kind, s.LogTail(20))
		case <-ctx.Done():
			s.stopLocked(syscall.SIGKILL)
			return fmt.Errorf("brokertest: %s was not ready: %w (last: %v); log:\n%s", s.kind, ctx.Err(), last, s.LogTail(20))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// ready reports why the server is not ready yet (nil when it is).
func (s *Server) ready() error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	if s.kind != RabbitMQ {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}
	// RabbitMQ opens its AMQP listener at the end of its boot, after the
	// durable queues are recovered; a connection and a channel say it
	// serves clients.
	return RabbitChannel(s.URL(), func(*amqp.Channel) error { return nil })
}

// RabbitChannel opens a connection and a channel to the RabbitMQ broker at
// url, runs f on the channel, and closes both.
func RabbitChannel(url string, f func(*amqp.Channel) error) error {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(5 * time.Second)})
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	return f(ch)
}

// Running reports whether the server's process is running (false after
// Stop or Kill, or if it exited on its own).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Stop stops the server gracefully (SIGTERM) and waits for it to exit.
func (s *Server) Stop() { s.mu.Lock(); defer s.mu.Unlock(); s.stopLocked(syscall.SIGTERM) }

// Kill kills the server with SIGKILL and waits for it to exit.
func (s *Server) Kill() { s.mu.Lock(); defer s.mu.Unlock(); s.stopLocked(syscall.SIGKILL) }

func (s *Server) stopLocked(sig syscall.Signal) {
	if s.cmd == nil {
		return
	}
	// The server's own children (RabbitMQ's helpers) share its group.
	signalGroup(s.cmd.Process.Pid, sig)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		signalGroup(s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
	}
	signalGroup(s.cmd.Process.Pid, syscall.SIGKILL) // stragglers
	// The server's process may be a script whose exit says nothing of the
	// VM it runs (rabbitmq-server's does): until every process of the
	// group is gone, the old VM may still hold the port, and a restart
	// would take its dying listener for the new server.
	waitGone(s.cmd.Process.Pid, 30*time.Second)
	s.cmd = nil
	s.log.Close()
}

// waitGone waits, for at most limit, until no process of group pgid is
// alive: each is gone or a zombie (whose threads have all exited, so its
// files, sockets included, are closed).
func waitGone(pgid int, limit time.Duration) {
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if !groupAlive(pgid) {
			return
		}
		signalGroup(pgid, syscall.SIGKILL)
	}
}

// groupAlive reports whether a thread of a process in group pgid is still
// running, from /proc.
func groupAlive(pgid int) bool {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		if stat, err := os.ReadFile(filepath.Join("/proc", p.Name(), "stat")); err != nil || procField(stat, 2) != strconv.Itoa(pgid) {
			continue
		}
		tasks, _ := os.ReadDir(filepath.Join("/proc", p.Name(), "task"))
		for _, task := range tasks {
			stat, err := os.ReadFile(filepath.Join("/proc", p.Name(), "task", task.Name(), "stat"))
			if err == nil && procField(stat, 0) != "Z" && procField(stat, 0) != "X" {
				return true
			}
		}
	}
	return false
}

// procField is field i (0: state, 1: ppid, 2: pgrp) of a /proc stat line,
// counted after the command name, which may hold spaces.
func procField(stat []byte, i int) string {
	j := bytes.LastIndex(stat, []byte(") "))
	if j < 0 {
		return ""
	}
	f := bytes.Fields(stat[j+2:])
	if i >= len(f) {
		return ""
	}
	return string(f[i])
}

// Close stops the server and its helpers and removes its directory.
func (s *Server) Close() error {
	s.Stop()
	if s.epmd != nil && s.epmd.Process != nil {
		s.epmd.Process.Kill()
		s.epmd.Wait()
	}
	return os.RemoveAll(s.dir)
}

// LogTail is the last n lines of the server's log.
func (s *Server) LogTail(n int) string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	return string(bytes.Join(lines[max(0, len(lines)-n):], []byte("\n")))
}

// LogErrors is the last n lines of the server's log that report its own
// errors (RabbitMQ's "[error]" lines, but for the channel errors of
// clients) or its recovery of queues after a restart: what the tail of a
// long log no longer shows.
func (s *Server) LogErrors(n int) string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
	var out [][]byte
	for line := range bytes.Lines(b) {
		switch {
		case bytes.Contains(line, []byte("Channel error on connection")), bytes.Contains(line, []byte("caused a channel exception")):
		case bytes.Contains(line, []byte("[error]")), bytes.Contains(line, []byte("[ERR]")), bytes.Contains(line, []byte("Recovering")):
			out = append(out, bytes.TrimRight(line, "\n"))
		}
	}
	return string(bytes.Join(out[max(0, len(out)-n):], []byte("\n")))
}

// classicRecovery is the line RabbitMQ logs at each boot for its classic
// queues: "Recovering N queues of type rabbit_classic_queue took …".
const classicRecovery = "queues of type rabbit_classic_queue"

// ClassicRecoveries returns, from a RabbitMQ server's log, how many times
// it has booted and recovered its classic queues, and how many it
// recovered the last time: a durable queue that a restart did not recover
// is gone with its messages (RabbitMQ 3.10 under load, now and then), even
// once a client has declared it again.
func (s *Server) ClassicRecoveries() (boots, last int) {
	b, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
	for line := range bytes.Lines(b) {
		_, rest, ok := bytes.Cut(line, []byte("Recovering "))
		if !ok || !bytes.Contains(rest, []byte(classicRecovery)) {
			continue
		}
		n, err := strconv.Atoi(string(bytes.Fields(rest)[0]))
		if err != nil {
			continue
		}
		boots, last = boots+1, n
	}
	return boots, last
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// RabbitQueueState says how many ready messages and consumers the
// RabbitMQ queue at url has, or why it cannot tell (the queue is gone:
// NOT_FOUND; the broker does not answer), for a test's failure message.
func RabbitQueueState(url, queue string) string {
	var q amqp.Queue
	err := RabbitChannel(url, func(ch *amqp.Channel) (err error) {
		q, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		return err
	})
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%d ready, %d consumers", q.Messages, q.Consumers)
}
