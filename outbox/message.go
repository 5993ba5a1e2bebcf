package outbox

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/internal/printable"
)

// Limits on a message, checked by Add before anything is written.
const (
	MaxIDLen         = 200 // bytes; no '/' and no control characters
	MaxChunkSize     = 10000
	DefaultChunkSize = 500
	MaxRecipients    = 1_000_000
)

// Message is one HTTP delivery, or a fan-out of many.
type Message struct {
	// ID names the message. It is the Idempotency-Key of a single
	// delivery, and the prefix of each chunk's key ("<ID>/<n>"). Adding a
	// message whose ID is already in the outbox is a no-op if it is the same
	// message and an error matching idem.ErrMismatch if it is not. Default:
	// 32 random hex digits. At most 200 bytes, without '/'.
	ID string
	// URL is where the message goes: an absolute http or https URL.
	URL string
	// Method defaults to POST.
	Method string
	// Header is sent with every delivery. The relay sets Idempotency-Key
	// itself, and Content-Type to application/json unless given.
	Header http.Header
	// Body is the request body. With Recipients it must be JSON: each
	// chunk sends {"message_id", "chunk", "chunks", "recipients", "body"},
	// with Body as "body".
	Body []byte
	// Recipients, when set, fans the message out in chunks.
	Recipients []string
	// ChunkSize is how many recipients one delivery carries. Default
	// Config.ChunkSize (500).
	ChunkSize int
}

// delivery is the job that delivers one message or one chunk of it.
type delivery struct {
	Key    string      `json:"key"`
	URL    string      `json:"url"`
	Method string      `json:"method"`
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body"`
}

func (delivery) Kind() string { return deliveryKind }

const deliveryKind = "idem.outbox.delivery"

// chunkBody is what each chunk of a fan-out sends.
type chunkBody struct {
	MessageID  string          `json:"message_id"`
	Chunk      int             `json:"chunk"`
	Chunks     int             `json:"chunks"`
	Recipients []string        `json:"recipients"`
	Body       json.RawMessage `json:"body"`
}

func inputErr(field, format string, args ...any) error {
	return &idem.InputError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// deliveries validates m and splits it into its deliveries. With a
// publisher, the URL is the publisher's to read.
func (m Message) deliveries(defaultChunk int, publisher bool) ([]delivery, string, error) {
	id := m.ID
	if id == "" {
		var b [16]byte
		rand.Read(b[:])
		id = hex.EncodeToString(b[:])
	}
	if printable.Check(id, 1, MaxIDLen) != nil || strings.ContainsRune(id, '/') {
		return nil, "", inputErr("message id", "%q must be at most %d bytes, without '/' or control characters", id, MaxIDLen)
	}
	u, err := url.Parse(m.URL)
	if !publisher && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		return nil, "", inputErr("url", "%q is not an absolute http(s) URL", m.URL)
	}
	method := m.Method
	if method == "" {
		method = http.MethodPost
	}
	if strings.ContainsFunc(method, func(r rune) bool { return r <= ' ' || r >= 0x7f }) {
		return nil, "", inputErr("method", "%q is not an HTTP method", method)
	}
	if len(m.Recipients) == 0 {
		if m.ChunkSize != 0 {
			return nil, "", inputErr("chunk size", "set without recipients")
		}
		return []delivery{{Key: id, URL: m.URL, Method: method, Header: m.Header, Body: m.Body}}, id, nil
	}
	size := m.ChunkSize
	if size == 0 {
		size = defaultChunk
	}
	switch {
	case size < 1 || size > MaxChunkSize:
		return nil, "", inputErr("chunk size", "%d is outside [1, %d]", size, MaxChunkSize)
	case len(m.Recipients) > MaxRecipients:
		return nil, "", inputErr("recipients", "%d are more than %d", len(m.Recipients), MaxRecipients)
	case !json.Valid(m.Body):
		return nil, "", inputErr("body", "must be JSON when the message has recipients")
	}
	n := (len(m.Recipients) + size - 1) / size
	out := make([]delivery, 0, n)
	for i := range n {
		b, err := json.Marshal(chunkBody{
			MessageID: id, Chunk: i + 1, Chunks: n,
			Recipients: m.Recipients[i*size : min((i+1)*size, len(m.Recipients))], Body: m.Body,
		})
		if err != nil {
			return nil, "", inputErr("body", "%v", err)
		}
		out = append(out, delivery{Key: id + "/" + strconv.Itoa(i+1), URL: m.URL, Method: method, Header: m.Header, Body: b})
	}
	return out, id, nil
}
