package outbox

import (
	"context"
	"net/http"
)

// Publisher sends the outbox's deliveries to a message broker instead of
// over HTTP (Config.Publisher). broker/kafka.Publisher is one.
type Publisher interface {
	// Publish sends one delivery and returns nil only once the broker has
	// durably accepted it. p.Key is the same on every attempt of the
	// delivery and must travel as the broker's message id, so that the
	// broker's deduplication or the consumer's inbox drops a repeat: a
	// relay that dies after Publish returned, before recording it,
	// publishes again. An error retries with backoff; jobs.Permanent(err)
	// dead-letters the delivery.
	Publish(ctx context.Context, p Publication) error
}

// Publication is one delivery handed to a Publisher.
type Publication struct {
	// Key is the delivery's stable id: the message ID, or "<ID>/<n>" for
	// chunk n of a fan-out.
	Key string
	// URL is the message's URL, which with a Publisher names where the
	// message goes in the broker's terms (a topic, say), or is empty.
	URL    string
	Header http.Header
	Body   []byte
}
