package rabbitmq_test

import (
	"context"
	"os"
	"testing"

	"github.com/idemdev/idem/internal/brokertest"
	"github.com/idemdev/idem/prove"
)

// The attack's workers are this test binary run again.
func TestMain(m *testing.M) {
	if prove.IsWorker() {
		os.Exit(prove.WorkerMain(context.Background(), os.Stdin, os.Stdout, os.Stderr))
	}
	brokertest.Main(m)
}
