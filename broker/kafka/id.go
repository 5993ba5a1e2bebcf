package kafka

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"
)

// IDHeader is the record header Publisher puts the outbox message id in.
const IDHeader = "idem-message-id"

// PositionID names a record by where it sits: "topic/partition/offset".
// Only a redelivery of the same record is a duplicate; a message a
// producer wrote twice (a retry without the idempotent producer) is two
// records and has two effects. It needs nothing from producers. Default.
func PositionID(r *kgo.Record) (string, error) { return position(r), nil }

// KeyID names a record by its key. Use it when producers give every
// message a unique key: then a message written twice, at two offsets or
// even in two partitions, has one effect. Keys that name an entity (every
// change of order 42 under key "42") are not message ids: the second
// change would be a mismatch. A record without a key is an error.
func KeyID(r *kgo.Record) (string, error) {
	if len(r.Key) == 0 {
		return "", errors.New("record has no key to name it by (KeyID)")
	}
	return string(r.Key), nil
}

// HeaderID names a record by the value of its header called name (the
// last one if repeated), such as IDHeader, which Publisher sets. A record
// without it is an error.
func HeaderID(name string) func(r *kgo.Record) (string, error) {
	return func(r *kgo.Record) (string, error) {
		for i := len(r.Headers) - 1; i >= 0; i-- {
			if r.Headers[i].Key == name && len(r.Headers[i].Value) > 0 {
				return string(r.Headers[i].Value), nil
			}
		}
		return "", errors.New("record has no " + name + " header to name it by (HeaderID)")
	}
}
