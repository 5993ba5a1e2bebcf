package idemhttp

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sync/semaphore"
)

// recorder is the ResponseWriter a guarded handler writes to. It holds the
// response until the handler returns, so that the ledger records it before
// the client sees it, and stores it for replay.
//
// The body's first spillAt bytes are held in memory; the rest goes to an
// unlinked temporary file (as a proxy's response buffering does), so that
// many large responses in flight hold little of the process's memory. It
// is read back for the ledger's write under a bound on the bytes being
// stored at once (see load), and sent to the client from the file. If the
// file cannot be made or written, the body is held in memory instead.
//
// In lease-bound mode a response that cannot be stored goes straight to
// the client instead: once it outgrows MaxResponse ("too-large"), when it
// is a stream (text/event-stream, or flushed without a Content-Length), or
// when the handler hijacks the connection. In transaction-bound mode
// nothing reaches the client before the commit: a response over
// MaxResponse is held whole as well (memory and file), recorded as too
// large, and Flush does nothing.
//
// Write errors from the client are not passed back to the handler while
// the response is buffered or too large, so that a handler (or an upstream
// behind a proxy) that already did the work also finishes its answer, and
// the key can record it, when the client went away.
type recorder struct {
	w      http.ResponseWriter
	h      http.Header
	status int
	buf    []byte // the held body's first bytes (all of it unless spilled); pooled once large (see getBuf)
	limit  int64
	dir    string // for the spill file; "": os.TempDir()
	lease  bool   // may hand the response to the client before the handler returns
	proxy  bool   // the handler is a Forwarder: its flushes do not make a stream

	passing   string   // "" while holding; else why the response went through
	tooLarge  bool     // transaction-bound: the held body outgrew limit, and is not stored
	spill     *os.File // the held body past buf, once it outgrew spillAt
	spilled   int64    // bytes in spill
	spillErr  error    // why the spill file failed: from then on the whole body is held in buf
	loaded    []byte   // the spilled body read back whole for the ledger (see load)
	budget    int64    // bytes of storing taken for loaded
	retained  bool     // what the ledger was given (loaded, else buf) may still be read by a write it did not answer
	clientErr error
}

// spillAt is how much of a held body is kept in memory; the rest spills
// to a temporary file.
const spillAt = minPooled

// storing bounds the bytes of spilled bodies read back into memory at once
// for the ledger's writes, across the process: a write waits for room.
// A body larger than the whole bound takes all of it.
var storing = semaphore.NewWeighted(storingBytes)

const storingBytes = 16 << 20

var (
	_ http.Flusher  = (*recorder)(nil)
	_ http.Hijacker = (*recorder)(nil)
)

func newRecorder(w http.ResponseWriter, limit int64, dir string, lease bool) *recorder {
	return &recorder{w: w, h: http.Header{}, limit: limit, dir: dir, lease: lease}
}

// Header returns the header map the handler fills.
func (r *recorder) Header() http.Header {
	if r.passing != "" {
		return r.w.Header()
	}
	return r.h
}

// WriteHeader records the status. Informational statuses (103 Early Hints)
// go to the client at once in lease-bound mode, and are dropped otherwise.
// An informational status's fields are its own: net/http keeps the header
// map it wrote them from, so the client's map is put back as it was, and
// they do not reach the final answer (which the replays would lack).
func (r *recorder) WriteHeader(code int) {
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		if r.lease && r.passing == "" && r.status == 0 {
			h := r.w.Header()
			was := h.Clone()
			copyHeader(h, r.h)
			r.w.WriteHeader(code)
			clear(h)
			copyHeader(h, was)
		}
		return
	}
	if r.status != 0 {
		return
	}
	r.status = code
	if r.lease && isEventStream(r.h) {
		r.pass(notStoredStreamed)
	}
}

// Write buffers p, or passes it through (see recorder).
func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if r.passing == "" && int64(len(r.buf))+r.spilled+int64(len(p)) > r.limit {
		if r.lease {
			r.pass(notStoredTooLarge)
		} else {
			r.tooLarge = true
		}
	}
	if r.passing == "" {
		if err := r.hold(p); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	if r.clientErr != nil && r.passing == notStoredTooLarge {
		return len(p), nil
	}
	n, err := r.w.Write(p)
	if err != nil && r.clientErr == nil {
		r.clientErr = err
	}
	if r.passing == notStoredTooLarge {
		return len(p), nil
	}
	return n, err
}

// hold keeps p: in buf up to spillAt, the rest in the spill file. If the
// file fails, the body is held in buf whole instead, up to the limit: a
// transaction-bound body over it has nowhere else to go, and the write
// fails.
func (r *recorder) hold(p []byte) error {
	if r.spill == nil {
		if cap(r.buf) == 0 {
			r.sizeBuffer()
		}
		n := min(len(p), max(r.heldMax()-len(r.buf), 0))
		if need := len(r.buf) + n; need > cap(r.buf) {
			r.grow(need)
		}
		r.buf = append(r.buf, p[:n]...)
		if p = p[n:]; len(p) == 0 {
			return nil
		}
	}
	n, err := r.spillWrite(p)
	if err == nil || r.tooLarge {
		return err
	}
	r.spillErr = err
	if err := r.unspill(); err != nil {
		return err
	}
	return r.hold(p[n:])
}

// heldMax is how much of the body buf holds: spillAt, or, once the spill
// file failed, all of it up to the limit (a transaction-bound body over
// the limit still has only the file).
func (r *recorder) heldMax() int {
	if r.spillErr != nil && !r.tooLarge {
		return int(r.limit)
	}
	return spillAt
}

// sizeBuffer gives the buffer the body's whole size at once when the
// handler declared it (and buf is to hold it): growing by doubling would
// leave the smaller copies behind as garbage, about the body's size again.
func (r *recorder) sizeBuffer() {
	if n, err := strconv.ParseInt(r.h.Get("Content-Length"), 10, 64); err == nil && n > 0 && n <= r.limit {
		r.buf = getBuf(min(int(n), r.heldMax()))
	}
}

// grow gives the buffer room for need bytes: twice its size (at most
// heldMax), or need if that is more. A large old buffer goes back to the
// pool, so that growing leaves no garbage behind.
func (r *recorder) grow(need int) {
	n := max(need, min(2*cap(r.buf), r.heldMax()), 512)
	b := append(getBuf(n), r.buf...)
	putBuf(r.buf)
	r.buf = b
}

// release ends the recorder's hold on its buffers (see buffer.go for who
// owns them): back to the pool, or, for the one a write the ledger did not
// answer may still read, abandoned. Calling it again does nothing.
func (r *recorder) release() {
	r.unload()
	given := r.retained // the ledger was given loaded, or buf if nothing was loaded
	if r.loaded != nil {
		endBuf(r.loaded, given)
		given = false
	}
	endBuf(r.buf, given)
	r.buf, r.loaded = nil, nil
}

// endBuf ends the recorder's hold on b: abandoned if a write the ledger
// did not answer may still read it, else back to the pool.
func endBuf(b []byte, unanswered bool) {
	if unanswered {
		abandonBuf(b)
	} else {
		putBuf(b)
	}
}

// retain marks the body the ledger was given as possibly still in use by
// it: its completion ended without an answer (a context ended after the
// write was queued, or a failure that may leave it queued), so the buffer
// is never reused (see abandonBuf).
func (r *recorder) retain() { r.retained = true }

// spillWrite appends p to the spill file, made (and unlinked, where the
// system allows) on the first call.
func (r *recorder) spillWrite(p []byte) (int, error) {
	if r.spill == nil {
		f, err := os.CreateTemp(r.dir, "idemhttp-response-*")
		if err != nil {
			return 0, fmt.Errorf("idemhttp: no temporary file for a large response: %w", err)
		}
		os.Remove(f.Name()) // fails on Windows while it is open: close removes it
		r.spill = f
	}
	n, err := r.spill.Write(p)
	r.spilled += int64(n)
	return n, err
}

// unspill reads what the spill file holds back into buf and closes the
// file: the rest of the body is held in memory.
func (r *recorder) unspill() error {
	if r.spill == nil {
		return nil
	}
	b, err := r.readBack()
	if err != nil {
		return err
	}
	putBuf(r.buf)
	r.buf = b
	r.closeSpill()
	return nil
}

// readBack returns the whole held body in a buffer of its own: buf, then
// what the spill file holds.
func (r *recorder) readBack() ([]byte, error) {
	size := len(r.buf) + int(r.spilled)
	b := append(getBuf(size), r.buf...)
	n, err := r.spill.ReadAt(b[len(b):size], 0)
	if n < int(r.spilled) {
		putBuf(b)
		return nil, fmt.Errorf("idemhttp: reading a large response back from its temporary file: %w", cmp.Or(err, io.ErrUnexpectedEOF))
	}
	return b[:size], nil
}

// load returns the held body as one slice for the ledger's write: buf, or
// for a spilled body a copy read back from the file, once the process's
// bound on bodies being stored (storing) has room for it. stored (or
// release) gives the room back.
//
// A transaction-bound handler's write does not wait for room: on SQLite
// its transaction holds the one writer, which the lease-bound writes
// holding the room may be waiting for.
func (r *recorder) load(ctx context.Context) ([]byte, error) {
	if r.spill == nil {
		return r.buf, nil
	}
	if r.lease {
		r.budget = min(int64(len(r.buf))+r.spilled, storingBytes)
		if err := storing.Acquire(ctx, r.budget); err != nil {
			r.budget = 0
			return nil, err
		}
	}
	b, err := r.readBack()
	r.loaded = b
	return b, err
}

// stored ends the ledger's write of what load gave it: the room in
// storing goes back, and so does a copy read back from the file, unless
// the write ended without an answer and may still read it (retain).
func (r *recorder) stored() {
	r.unload()
	if r.loaded != nil && !r.retained {
		putBuf(r.loaded)
		r.loaded = nil
	}
}

func (r *recorder) unload() {
	if r.budget > 0 {
		storing.Release(r.budget)
		r.budget = 0
	}
}

// pass hands the response to the client: the status, the headers so far
// and what is held; what follows goes straight through.
func (r *recorder) pass(why string) {
	r.passing = why
	copyHeader(r.w.Header(), r.h)
	r.w.WriteHeader(cmp.Or(r.status, http.StatusOK))
	if err := r.writeHeld(); err != nil {
		r.clientErr = err
	}
	r.close()
}

// writeHeld writes the held body to the client: buf, then the spill file.
func (r *recorder) writeHeld() error {
	if len(r.buf) > 0 {
		if _, err := r.w.Write(r.buf); err != nil {
			return err
		}
	}
	if r.spill == nil {
		return nil
	}
	if _, err := r.spill.Seek(0, io.SeekStart); err != nil {
		return err
	}
	_, err := io.Copy(r.w, r.spill) // the client's connection may send the file (sendfile)
	return err
}

// FlushError flushes a response that goes through. In lease-bound mode a
// flush of a held response without Content-Length marks it as a stream
// and sends it through; otherwise a flush does nothing.
func (r *recorder) FlushError() error {
	if r.proxy && r.passing == "" && !isEventStream(r.h) {
		return nil // a proxy flushes whatever it copies; hold it and store it whole
	}
	if r.passing == "" {
		if !r.lease || r.h.Get("Content-Length") != "" {
			return nil
		}
		if r.status == 0 {
			r.WriteHeader(http.StatusOK)
		}
		if r.passing == "" {
			r.pass(notStoredStreamed)
		}
	}
	err := http.NewResponseController(r.w).Flush()
	if r.passing == notStoredTooLarge {
		return nil
	}
	return err
}

// Flush is FlushError for handlers that look for http.Flusher.
func (r *recorder) Flush() { _ = r.FlushError() }

// Hijack hands the connection to the handler; the key then records that
// its response cannot be replayed. Not supported in transaction-bound mode.
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if !r.lease {
		return nil, nil, fmt.Errorf("idemhttp: hijacking in transaction-bound mode: %w", http.ErrNotSupported)
	}
	conn, rw, err := http.NewResponseController(r.w).Hijack()
	if err == nil {
		r.passing = notStoredHijacked
	}
	return conn, rw, err
}

// Unwrap gives http.ResponseController the client's writer for the
// methods recorder does not intercept (deadlines, full duplex).
func (r *recorder) Unwrap() http.ResponseWriter { return r.w }

// held reports whether the whole response is still with the recorder.
func (r *recorder) held() bool { return r.passing == "" }

// result is the status and headers of a held response (load has its
// body), with its Content-Type sniffed from the body's first bytes as
// net/http would, so that the stored headers are the ones the client gets.
func (r *recorder) result() (int, http.Header) {
	status := cmp.Or(r.status, http.StatusOK)
	if _, set := r.h["Content-Type"]; !set && len(r.buf) > 0 && bodyAllowed(status) {
		r.h.Set("Content-Type", http.DetectContentType(r.buf))
	}
	return status, r.h
}

// send writes a held response to the client. Errors are the client's
// problem (it went away); the key has recorded the response already.
func (r *recorder) send() {
	if r.passing != "" {
		return
	}
	status, h := r.result()
	dst := r.w.Header()
	trailers := copyHeaderButTrailers(dst, h)
	if !bodyAllowed(status) {
		dst.Del("Content-Length")
		r.w.WriteHeader(status)
		return
	}
	if len(trailers) == 0 { // with trailers, net/http sends the body chunked
		dst.Set("Content-Length", strconv.FormatInt(int64(len(r.buf))+r.spilled, 10))
	}
	r.w.WriteHeader(status)
	defer func() {
		for _, k := range trailers {
			dst[k] = h[k]
		}
	}()
	r.writeHeld()
}

// copyHeaderButTrailers copies h to dst but for the fields the handler
// meant as trailers, whose names it returns: those h's Trailer field
// announced, and those set with http.TrailerPrefix (a reverse proxy sets
// an upstream's trailers in one of these ways once the body is copied).
// The first answer sends them after the body, as trailers; a replay has
// none (they are not stored). One pass, as copyHeader's, for the answers
// (nearly all) that have none.
func copyHeaderButTrailers(dst, h http.Header) (trailers []string) {
	announced := h["Trailer"]
	for k, v := range h {
		if strings.HasPrefix(k, http.TrailerPrefix) || (announced != nil && isAnnounced(announced, k)) {
			trailers = append(trailers, k)
			continue
		}
		dst[k] = v
	}
	return trailers
}

// isAnnounced reports whether a Trailer field's values name the field k.
func isAnnounced(announced []string, k string) bool {
	for _, v := range announced {
		for name := range strings.SplitSeq(v, ",") {
			if http.CanonicalHeaderKey(strings.TrimSpace(name)) == k {
				return true
			}
		}
	}
	return false
}

// discard forgets the handler's response, for answering with a problem
// instead (transaction-bound mode, when the commit failed).
func (r *recorder) discard() {
	r.h = http.Header{}
	r.release()
}

// close gives the buffers back to the pool (the response is sent and
// recorded by now) and closes the spill file, if any.
func (r *recorder) close() {
	r.release()
	r.closeSpill()
}

func (r *recorder) closeSpill() {
	if r.spill != nil {
		r.spill.Close()
		os.Remove(r.spill.Name()) // where it could not be removed while open
		r.spill, r.spilled = nil, 0
	}
}

func copyHeader(dst, src http.Header) {
	for k, v := range src {
		dst[k] = v
	}
}

func isEventStream(h http.Header) bool {
	return parseMediaType(h.Get("Content-Type")) == "text/event-stream"
}

// bodyAllowed mirrors net/http: 1xx, 204 and 304 responses have no body.
func bodyAllowed(status int) bool {
	return !(status >= 100 && status < 200) && status != http.StatusNoContent && status != http.StatusNotModified
}
