package prove

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
)

// cutProxy is a TCP proxy in front of PostgreSQL that reads the frontend
// messages clients send and cuts connections at the moments a client
// cannot know the outcome: when a COMMIT is sent (before it reaches the
// server, or after), and at random after a statement is sent (a Query, or
// the Sync that runs an extended-protocol statement; autocommit writes
// commit there).
type cutProxy struct {
	ln       net.Listener
	upstream string
	commit   float64 // probability of cutting at a COMMIT
	random   float64 // probability of cutting after another statement

	rngMu sync.Mutex
	rng   *rand.Rand

	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
	wg     sync.WaitGroup

	commitsSeen, cutBefore, cutAfter, cutRandom atomic.Int64
}

// startCutProxy listens on a free loopback port and forwards to upstream.
func startCutProxy(upstream string, seed uint64, commit, random float64) (*cutProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &cutProxy{ln: ln, upstream: upstream, commit: commit, random: random,
		rng: rand.New(rand.NewPCG(seed, 0x70c7)), conns: map[net.Conn]bool{}}
	p.wg.Go(p.accept)
	return p, nil
}

// Addr is the proxy's host:port.
func (p *cutProxy) Addr() string { return p.ln.Addr().String() }

// Close stops accepting, closes every connection and waits.
func (p *cutProxy) Close() {
	p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *cutProxy) summary() string {
	return fmt.Sprintf("the proxy saw %d COMMITs and cut %d before they reached the server, %d after; %d connections cut after another statement",
		p.commitsSeen.Load(), p.cutBefore.Load(), p.cutAfter.Load(), p.cutRandom.Load())
}

func (p *cutProxy) chance(prob float64) bool {
	p.rngMu.Lock()
	defer p.rngMu.Unlock()
	return p.rng.Float64() < prob
}

func (p *cutProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

func (p *cutProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *cutProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.serve(client) })
	}
}

func (p *cutProxy) serve(client net.Conn) {
	if !p.track(client) {
		return
	}
	defer p.untrack(client)
	server, err := net.Dial("tcp", p.upstream)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	p.wg.Go(func() {
		io.Copy(client, server)
		client.Close()
	})
	p.frontend(client, server)
}

// forceCutAt is the COMMIT the proxy cuts, if the odds cut none before
// it. Not the first: that one may be a worker's setup.
const forceCutAt = 2

// Frontend message types the proxy looks at.
const (
	msgQuery = 'Q'
	msgParse = 'P'
	msgSync  = 'S'
)

// Startup-phase request codes after which another startup-format message
// follows (the server answers with one byte).
const (
	sslRequest    = 80877103
	gssencRequest = 80877104
)

// frontend copies client to server message by message, cutting both
// connections where it decides to. It returns when either side ends.
func (p *cutProxy) frontend(client, server net.Conn) {
	// Startup phase: length-prefixed messages without a type byte.
	for {
		msg, err := readMsg(client, false)
		if err != nil || writeAll(server, msg) != nil {
			return
		}
		if len(msg) < 8 {
			return
		}
		if code := binary.BigEndian.Uint32(msg[4:8]); code != sslRequest && code != gssencRequest {
			break
		}
	}
	commitPending := false // a Parse of COMMIT awaits its Sync
	for {
		msg, err := readMsg(client, true)
		if err != nil {
			return
		}
		isCommit := false
		switch msg[0] {
		case msgQuery:
			isCommit = isCommitSQL(msg[5:])
		case msgParse:
			if _, text, ok := bytes.Cut(msg[5:], []byte{0}); ok { // after the statement name
				commitPending = commitPending || isCommitSQL(text)
			}
		case msgSync:
			isCommit, commitPending = commitPending, false
		}
		cut, before := false, false
		switch {
		case isCommit:
			n := p.commitsSeen.Add(1)
			// By chance, or at the forceCutAt-th COMMIT if none was cut
			// before it: a short run's few COMMITs may all escape the
			// odds, and the attack must land.
			if cut = p.chance(p.commit) || (n >= forceCutAt && p.cutBefore.Load()+p.cutAfter.Load() == 0); cut {
				before = p.chance(0.5)
			}
		case msg[0] == msgQuery || msg[0] == msgSync:
			cut = p.chance(p.random)
		}
		if cut && before {
			p.cutBefore.Add(1)
			return
		}
		if writeAll(server, msg) != nil {
			return
		}
		if cut {
			if isCommit {
				p.cutAfter.Add(1)
			} else {
				p.cutRandom.Add(1)
			}
			return
		}
	}
}

// readMsg reads one protocol message: type byte (when typed), int32
// length counting itself, body.
func readMsg(r io.Reader, typed bool) ([]byte, error) {
	head := 4
	if typed {
		head = 5
	}
	msg := make([]byte, head, head+64)
	if _, err := io.ReadFull(r, msg); err != nil {
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(msg[head-4:]))
	if n < 4 || n > 1<<30 {
		return nil, errors.New("bad message length")
	}
	msg = append(msg, make([]byte, n-4)...)
	if _, err := io.ReadFull(r, msg[head:]); err != nil {
		return nil, err
	}
	return msg, nil
}

func writeAll(w io.Writer, b []byte) error {
	_, err := w.Write(b)
	return err
}

// isCommitSQL reports whether a statement's text (up to its NUL) is a
// COMMIT (or END).
func isCommitSQL(text []byte) bool {
	text, _, _ = bytes.Cut(text, []byte{0})
	t := bytes.ToUpper(bytes.TrimSpace(bytes.TrimRight(bytes.TrimSpace(text), ";")))
	return bytes.HasPrefix(t, []byte("COMMIT")) || bytes.Equal(t, []byte("END"))
}
