package prove

import (
	"testing"
	"time"
)

// TestBrokerKafka runs broker-redelivery/kafka alone on each driver (it
// also runs in TestScenarios), and without the guard, where the replay of
// the topic must show as duplicates.
func TestBrokerKafka(t *testing.T) {
	for _, driver := range []string{"sqlite", "postgres", "noguard"} {
		t.Run(driver, func(t *testing.T) {
			t.Parallel()
			db := driver
			if driver == "postgres" {
				requirePostgres(t)
			}
			if driver == "noguard" {
				db = "sqlite"
			}
			cfg := testConfig(t, db)
			cfg.Ops, cfg.Workers = 60, 3
			cfg.NoGuard = driver == "noguard"
			cfg.Scenarios = []string{"broker-redelivery/kafka"}
			rep := runLogged(t, cfg, 3*time.Minute)
			if len(rep.Results) != 1 {
				t.Fatalf("%d results, want 1", len(rep.Results))
			}
			r := rep.Results[0]
			if cfg.NoGuard {
				if r.OK || r.Duplicates < cfg.Ops {
					t.Fatalf("without the guard: ok=%v with %d duplicates, want FAIL with every replayed record a duplicate", r.OK, r.Duplicates)
				}
				return
			}
			checkHolds(t, r)
			if r.Effects != cfg.Ops {
				t.Fatalf("%d effects for %d operations", r.Effects, cfg.Ops)
			}
		})
	}
}
