package rabbitmq

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/jobs"
	"github.com/idemdev/idem/outbox"
)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Exchange is the exchange deliveries are published to; "" is the
	// default exchange, where the routing key names the queue.
	Exchange string
	// RoutingKey is the routing key of deliveries with an empty
	// outbox.Message URL (the URL is the routing key otherwise).
	RoutingKey string
}

// Publisher is an outbox.Publisher into RabbitMQ: each delivery is
// published persistent and mandatory, with its key as the message-id, on
// a channel in confirm mode, and counts as sent only once the broker
// confirmed it (and did not return it as unroutable). A relay that crashes
// after the confirm publishes it again with the same message-id; RabbitMQ
// does not deduplicate, so the queue holds it twice and a Consumer (whose
// inbox id is the message-id) applies it once.
//
// Publishes take turns on one channel; it is reopened after a failure.
type Publisher struct {
	dial Dialer
	cfg  PublisherConfig

	mu      sync.Mutex
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns chan amqp.Return
}

// NewPublisher makes a Publisher that connects with dial when it first
// publishes.
func NewPublisher(dial Dialer, cfg *PublisherConfig) (*Publisher, error) {
	if dial == nil {
		return nil, &idem.InputError{Field: "dialer", Reason: "must not be nil"}
	}
	p := &Publisher{dial: dial}
	if cfg != nil {
		p.cfg = *cfg
	}
	return p, nil
}

var _ outbox.Publisher = (*Publisher)(nil)

// Publish publishes e and waits for the broker's confirm.
func (p *Publisher) Publish(ctx context.Context, e outbox.Envelope) error {
	key := cmp.Or(e.To, p.cfg.RoutingKey)
	if key == "" && p.cfg.Exchange == "" {
		return jobs.Permanent(fmt.Errorf("rabbitmq: delivery %s names no routing key, and the publisher has none", e.Key))
	}
	msg := amqp.Publishing{
		MessageId: e.Key, DeliveryMode: amqp.Persistent, Body: e.Body,
		ContentType: e.Header.Get("Content-Type"),
	}
	if len(e.Header) > 0 {
		msg.Headers = amqp.Table{}
		for k, vs := range e.Header {
			if k != "Content-Type" && len(vs) > 0 {
				msg.Headers[k] = vs[0]
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.open(); err != nil {
		return fmt.Errorf("rabbitmq: publish %s: %w", e.Key, err)
	}
	err := p.publish(ctx, key, msg)
	if err != nil && !errors.Is(err, errReturned) {
		p.closeLocked() // the channel may be unusable; reopen on the next publish
	}
	if err != nil {
		return fmt.Errorf("rabbitmq: publish %s to %q/%q: %w", e.Key, p.cfg.Exchange, key, err)
	}
	return nil
}

var errReturned = errors.New("returned by the broker as unroutable (no queue bound)")

func (p *Publisher) publish(ctx context.Context, key string, msg amqp.Publishing) error {
	conf, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, p.cfg.Exchange, key, true, false, msg)
	if err != nil {
		return err
	}
	acked, err := conf.WaitContext(ctx)
	if err != nil {
		return err
	}
	if !acked {
		return errors.New("nacked by the broker")
	}
	// The broker sends basic.return before the ack of an unroutable
	// mandatory message, and the client hands it over before the confirm.
	select {
	case r := <-p.returns:
		if r.MessageId == msg.MessageId {
			return errReturned
		}
	default:
	}
	return nil
}

func (p *Publisher) open() error {
	if p.ch != nil && !p.ch.IsClosed() {
		return nil
	}
	p.closeLocked()
	conn, err := p.dial()
	if err != nil {
		return err
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		conn.Close()
		return err
	}
	p.conn, p.ch = conn, ch
	p.returns = ch.NotifyReturn(make(chan amqp.Return, 16))
	return nil
}

func (p *Publisher) closeLocked() {
	if p.conn != nil {
		p.conn.Close()
	}
	p.conn, p.ch = nil, nil
}

// Close closes the Publisher's connection.
func (p *Publisher) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closeLocked()
	return nil
}
