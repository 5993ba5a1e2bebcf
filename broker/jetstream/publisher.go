package jetstream

import (
	"cmp"
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/jobs"
	"github.com/idemdev/idem/outbox"
)

// Publisher is an outbox.Publisher into JetStream: each delivery is
// published with Nats-Msg-Id set to its key and counts as sent once the
// stream acknowledged it (stored). A relay that crashes after the publish
// and publishes again within the stream's Duplicates window (default two
// minutes) is dropped by JetStream; later than that, the stream holds it
// twice under one Nats-Msg-Id, and a Consumer (whose inbox id is that
// header) still applies it once.
type Publisher struct {
	js      js.JetStream
	subject string
}

// NewPublisher makes a Publisher onto j; subject is where deliveries with
// an empty outbox.Message URL go (it may be empty if every message names
// its subject).
func NewPublisher(j js.JetStream, subject string) (*Publisher, error) {
	if j == nil {
		return nil, &idem.InputError{Field: "jetstream", Reason: "must not be nil"}
	}
	return &Publisher{js: j, subject: subject}, nil
}

var _ outbox.Publisher = (*Publisher)(nil)

// Publish publishes e to e.To (or the default subject) and waits for the
// stream's acknowledgement. A subject no stream captures is an error
// (retried: the stream may be created later).
func (p *Publisher) Publish(ctx context.Context, e outbox.Envelope) error {
	subject := cmp.Or(e.To, p.subject)
	if subject == "" {
		return jobs.Permanent(fmt.Errorf("jetstream: delivery %s names no subject, and the publisher has no default", e.Key))
	}
	m := nats.NewMsg(subject)
	m.Data = e.Body
	for k, vs := range e.Header {
		m.Header[k] = vs
	}
	m.Header.Set(js.MsgIDHeader, e.Key)
	if _, err := p.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("jetstream: publish %s to %s: %w", e.Key, subject, err)
	}
	return nil
}
