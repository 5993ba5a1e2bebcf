package outbox

import (
	"context"
	"net/http"
)

// Publisher sends deliveries to a message broker instead of an HTTP
// endpoint (packages broker/jetstream and broker/rabbitmq implement it).
// With Config.Publisher set, the relay calls it for every delivery; a nil
// error completes the delivery, an error retries it like a network error,
// and an error marked with jobs.Permanent dead-letters it.
type Publisher interface {
	// Publish sends e and returns nil only once the broker has taken
	// responsibility for it (a publish acknowledgement or confirm). After a
	// crash or an error it is called again with the same e.Key, which the
	// broker or its consumers deduplicate on: a crash after the broker
	// took e and before the relay recorded it publishes e again, under the
	// same key.
	Publish(ctx context.Context, e Envelope) error
}

// Envelope is one delivery as a Publisher gets it.
type Envelope struct {
	// Key is the delivery's stable id: the message ID, or "<ID>/<n>" for a
	// chunk of a fan-out. Publishers send it as the broker message id.
	Key string
	// To is the Message's URL field: with a Publisher, the destination
	// (a subject, a routing key); empty means the Publisher's default.
	To     string
	Header http.Header
	Body   []byte
}

// publish hands d to the configured Publisher.
func (r *relay) publish(ctx context.Context, d delivery) error {
	return r.o.pub.Publish(ctx, Envelope{Key: d.Key, To: d.URL, Header: d.Header, Body: d.Body})
}
