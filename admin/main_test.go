package admin_test

import (
	"testing"

	"github.com/idemdev/idem/internal/pgtest"
)

// TestMain closes the shared PostgreSQL cluster the runs tests start.
func TestMain(m *testing.M) { pgtest.Main(m) }
