package prove

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
)

// TestCutProxyForcesACommitCut: with odds that never cut, the proxy still
// cuts the forceCutAt-th COMMIT, so that a short ambiguous-commit run is
// attacked. The upstream is a sink: the proxy reads only what clients send.
func TestCutProxyForcesACommitCut(t *testing.T) {
	sink, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	go func() {
		for {
			c, err := sink.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	px, err := startCutProxy(sink.Addr().String(), 1, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()

	c, err := net.Dial("tcp", px.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	startup := binary.BigEndian.AppendUint32(nil, 3<<16) // protocol 3.0
	startup = append(startup, "user\x00x\x00\x00"...)
	send := func(typ byte, body []byte) error {
		var msg []byte
		if typ != 0 {
			msg = append(msg, typ)
		}
		msg = binary.BigEndian.AppendUint32(msg, uint32(4+len(body)))
		_, err := c.Write(append(msg, body...))
		return err
	}
	if err := send(0, startup); err != nil {
		t.Fatal(err)
	}
	for range forceCutAt {
		if err := send(msgQuery, []byte("COMMIT\x00")); err != nil {
			t.Fatal(err)
		}
	}
	// The proxy then closes the connection, after a cut or at the end of
	// what the client sends: reading ends either way.
	c.(*net.TCPConn).CloseWrite()
	io.Copy(io.Discard, c)
	if seen, cut := px.commitsSeen.Load(), px.cutBefore.Load()+px.cutAfter.Load(); seen != forceCutAt || cut != 1 {
		t.Fatalf("the proxy saw %d COMMITs and cut %d; want %d seen and 1 cut", seen, cut, forceCutAt)
	}
}
