package rabbitmq_test

import (
	"testing"

	"github.com/idemdev/idem/internal/brokertest"
	"github.com/idemdev/idem/prove/provetest"
)

// The attack (idem prove's broker-redelivery/rabbitmq, with this test
// binary as the workers): consumers SIGKILLed before the commit and after
// it (before the ack), two of them competing, rabbitmq-server killed and
// restarted mid-run, every message published twice. Each message must
// have exactly one effect, on SQLite and on PostgreSQL; and without the
// inbox (NoGuard), the same attack must produce duplicates.
func TestAttack(t *testing.T) {
	brokertest.Skip(t, brokertest.RabbitMQ)
	provetest.Broker(t, "broker-redelivery/rabbitmq")
}
