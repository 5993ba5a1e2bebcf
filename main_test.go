package idem_test

import (
	"os"
	"testing"

	"github.com/idemdev/idem/internal/pgtest"
)

func TestMain(m *testing.M) {
	if os.Getenv(runChildEnv) != "" {
		os.Exit(runChildMain())
	}
	if os.Getenv(runPauseEnv) != "" {
		os.Exit(runPauseChildMain())
	}
	pgtest.Main(m)
}
