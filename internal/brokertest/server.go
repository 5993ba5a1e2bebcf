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
// on the same port and data, and waits until it accepts connections.
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
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-exited:
			s.cmd = nil
			log.Close()
			return fmt.Errorf("brokertest: %s exited while starting; log:\n%s", s.kind, s.LogTail(20))
		case <-ctx.Done():
			s.stopLocked(syscall.SIGKILL)
			return fmt.Errorf("brokertest: %s did not accept connections: %w; log:\n%s", s.kind, ctx.Err(), s.LogTail(20))
		case <-time.After(100 * time.Millisecond):
		}
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
	syscall.Kill(-s.cmd.Process.Pid, sig)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
	}
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL) // stragglers
	s.cmd = nil
	s.log.Close()
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

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// childAttr puts a server in its own process group (so its helpers can be
// stopped with it) and kills it when the process that started it dies.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
