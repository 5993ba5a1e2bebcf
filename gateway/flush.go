package gateway

import (
	"mime"
	"net/http"
)

// heldFlush stands between the reverse proxy and the middleware's writer.
// httputil.ReverseProxy flushes after every write of a response without a
// Content-Length, and the middleware takes a flush without a length as the
// sign of a stream it must not store; most such responses are ordinary
// chunked answers. heldFlush lets flushes through only for
// text/event-stream, so every other response is held and stored (up to
// MaxResponse).
type heldFlush struct{ http.ResponseWriter }

// FlushError flushes event streams and ignores every other flush.
func (h heldFlush) FlushError() error {
	if mt, _, _ := mime.ParseMediaType(h.Header().Get("Content-Type")); mt == "text/event-stream" {
		return http.NewResponseController(h.ResponseWriter).Flush()
	}
	return nil
}

// Unwrap exposes the writer below for http.ResponseController (hijacking
// for protocol upgrades, deadlines).
func (h heldFlush) Unwrap() http.ResponseWriter { return h.ResponseWriter }
