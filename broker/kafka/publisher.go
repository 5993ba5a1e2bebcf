package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/outbox"
)

// PublisherConfig configures a Publisher. Seeds is required.
type PublisherConfig struct {
	// Seeds are the brokers to bootstrap from ("host:port").
	Seeds []string
	// Topic receives the messages whose URL is empty; a message's URL,
	// when set, is the name of its topic.
	Topic string
	// Options are extra franz-go options (TLS, SASL, linger), applied
	// after the publisher's own. Do not disable idempotent writes.
	Options []kgo.Opt
}

// Publisher publishes an outbox's deliveries to Kafka: pass it as
// outbox.Config.Publisher. Each record carries the delivery's stable key
// (the outbox message id) as its key and in the IDHeader header.
//
// franz-go's idempotent producer (acks from all in-sync replicas) keeps
// its own retries from writing a record twice. A relay that dies after
// Kafka accepted a record, before the outbox recorded it, publishes it
// again from a new producer, which Kafka cannot tell apart: the record is
// then in the log twice, with the same id. Consumers that name records by
// that id (KeyID, or HeaderID(IDHeader)) apply it once.
type Publisher struct {
	cl    *kgo.Client
	topic string
}

var _ outbox.Publisher = (*Publisher)(nil)

// NewPublisher makes a publisher; Close it when the outbox has stopped.
func NewPublisher(cfg *PublisherConfig) (*Publisher, error) {
	var c PublisherConfig
	if cfg != nil {
		c = *cfg
	}
	if len(c.Seeds) == 0 {
		return nil, &idem.InputError{Field: "seeds", Reason: "at least one broker is required"}
	}
	opts := []kgo.Opt{kgo.SeedBrokers(c.Seeds...), kgo.RequiredAcks(kgo.AllISRAcks())}
	cl, err := kgo.NewClient(append(opts, c.Options...)...)
	if err != nil {
		return nil, fmt.Errorf("kafka: client: %w", err)
	}
	return &Publisher{cl: cl, topic: c.Topic}, nil
}

// Publish produces one record and waits for Kafka's acknowledgement.
func (p *Publisher) Publish(ctx context.Context, m outbox.Envelope) error {
	topic := m.To
	if topic == "" {
		topic = p.topic
	}
	if topic == "" {
		return idem.Permanent(errors.New("kafka: no topic: the message has no URL and the publisher no Topic"))
	}
	r := &kgo.Record{Topic: topic, Key: []byte(m.Key), Value: m.Body}
	for k, vs := range m.Header {
		for _, v := range vs {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
	}
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: IDHeader, Value: []byte(m.Key)})
	if err := p.cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		return fmt.Errorf("kafka: produce %s to %s: %w", m.Key, topic, err)
	}
	return nil
}

// Close flushes nothing (Publish waits for each record) and closes the
// client.
func (p *Publisher) Close() { p.cl.Close() }
