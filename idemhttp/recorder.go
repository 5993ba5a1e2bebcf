package idemhttp

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
)

// recorder is the ResponseWriter a guarded handler writes to. It holds the
// response until the handler returns, so that the ledger records it before
// the client sees it, and stores it for replay.
//
// In lease-bound mode a response that cannot be stored goes straight to
// the client instead: once it outgrows MaxResponse ("too-large"), when it
// is a stream (text/event-stream, or flushed without a Content-Length), or
// when the handler hijacks the connection. In transaction-bound mode
// nothing reaches the client before the commit: a large response spills to
// a temporary file, and Flush does nothing.
//
// Write errors from the client are not passed back to the handler while
// the response is buffered or too large, so that a handler (or an upstream
// behind a proxy) that already did the work also finishes its answer, and
// the key can record it, when the client went away.
type recorder struct {
	w      http.ResponseWriter
	h      http.Header
	status int
	buf    []byte // the held body; a pooled buffer once it is large (see getBuf)
	limit  int64
	lease  bool // may hand the response to the client before the handler returns
	proxy  bool // the handler is a Forwarder: its flushes do not make a stream

	passing   string // "" while holding; else why the response went through
	retained  bool   // buf may still be read by a write the ledger did not answer
	spill     *os.File
	spilled   int64
	clientErr error
}

var (
	_ http.Flusher  = (*recorder)(nil)
	_ http.Hijacker = (*recorder)(nil)
)

func newRecorder(w http.ResponseWriter, limit int64, lease bool) *recorder {
	return &recorder{w: w, h: http.Header{}, limit: limit, lease: lease}
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
			return r.spillWrite(p)
		}
	}
	if r.passing == "" {
		if cap(r.buf) == 0 {
			r.sizeBuffer()
		}
		if need := len(r.buf) + len(p); need > cap(r.buf) {
			r.grow(need)
		}
		r.buf = append(r.buf, p...)
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

// sizeBuffer gives the buffer the body's whole size at once when the
// handler declared it (and it fits the limit): growing by doubling would
// leave the smaller copies behind as garbage, about the body's size again.
func (r *recorder) sizeBuffer() {
	if n, err := strconv.ParseInt(r.h.Get("Content-Length"), 10, 64); err == nil && n > 0 && n <= r.limit {
		r.buf = getBuf(int(n))
	}
}

// grow gives the buffer room for need bytes: twice its size (at most the
// limit), or need if that is more. A large old buffer goes back to the
// pool, so that growing leaves no garbage behind.
func (r *recorder) grow(need int) {
	n := max(need, min(2*cap(r.buf), int(r.limit)), 512)
	b := append(getBuf(n), r.buf...)
	putBuf(r.buf)
	r.buf = b
}

// release ends the recorder's hold on its buffer (see buffer.go for who
// owns it): back to the pool, or, if a write the ledger did not answer may
// still read it, abandoned. Calling it again does nothing.
func (r *recorder) release() {
	if r.retained {
		abandonBuf(r.buf)
	} else {
		putBuf(r.buf)
	}
	r.buf = nil
}

// retain marks the held body as possibly still in use by the ledger: its
// completion ended without an answer (a context ended after the write was
// queued, or a failure that may leave it queued), so the buffer is never
// reused (see abandonBuf).
func (r *recorder) retain() { r.retained = true }

func (r *recorder) spillWrite(p []byte) (int, error) {
	if r.spill == nil {
		f, err := os.CreateTemp("", "idemhttp-response-*")
		if err != nil {
			return 0, fmt.Errorf("idemhttp: response larger than %d bytes, and no temporary file for it: %w", r.limit, err)
		}
		r.spill = f
	}
	n, err := r.spill.Write(p)
	r.spilled += int64(n)
	return n, err
}

// pass hands the response to the client: the status, the headers so far
// and what is buffered; what follows goes straight through.
func (r *recorder) pass(why string) {
	r.passing = why
	copyHeader(r.w.Header(), r.h)
	r.w.WriteHeader(cmp.Or(r.status, http.StatusOK))
	if len(r.buf) > 0 {
		if _, err := r.w.Write(r.buf); err != nil {
			r.clientErr = err
		}
	}
	r.release()
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

// result is the status, headers and body of a held response, with its
// Content-Type sniffed as net/http would, so that the stored headers are
// the ones the client gets.
func (r *recorder) result() (int, http.Header, []byte) {
	status := cmp.Or(r.status, http.StatusOK)
	body := r.buf
	if _, set := r.h["Content-Type"]; !set && len(body) > 0 && bodyAllowed(status) && r.spill == nil {
		r.h.Set("Content-Type", http.DetectContentType(body))
	}
	return status, r.h, body
}

// send writes a held response to the client. Errors are the client's
// problem (it went away); the key has recorded the response already.
func (r *recorder) send() {
	if r.passing != "" {
		return
	}
	status, h, body := r.result()
	dst := r.w.Header()
	trailers := copyHeaderButTrailers(dst, h)
	if !bodyAllowed(status) {
		dst.Del("Content-Length")
		r.w.WriteHeader(status)
		return
	}
	if len(trailers) == 0 { // with trailers, net/http sends the body chunked
		dst.Set("Content-Length", strconv.FormatInt(int64(len(body))+r.spilled, 10))
	}
	r.w.WriteHeader(status)
	defer func() {
		for _, k := range trailers {
			dst[k] = h[k]
		}
	}()
	if _, err := r.w.Write(body); err != nil || r.spill == nil {
		return
	}
	if _, err := r.spill.Seek(0, io.SeekStart); err == nil {
		io.Copy(r.w, r.spill)
	}
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

// close gives the buffer back to the pool (the response is sent and
// recorded by now) and removes the spill file, if any.
func (r *recorder) close() {
	r.release()
	if r.spill != nil {
		r.spill.Close()
		os.Remove(r.spill.Name())
		r.spill = nil
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
