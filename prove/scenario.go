package prove

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Scenario names one attack, for help texts.
type Scenario struct {
	Name    string
	Summary string
	// Variants are run as separate rows, named Name/variant.
	Variants []string
}

// scenario is a Scenario with its code.
type scenario struct {
	Scenario
	// skip, when set, returns why the scenario cannot run on this
	// database ("" when it can).
	skip func(r *runner) string
	// skipVariant is skip for one variant.
	skipVariant func(r *runner, variant string) string
	run         func(ctx context.Context, t *trial) error
}

// all is every scenario, in the order of the report.
var all = []scenario{
	{Scenario: Scenario{Name: "crash-before-call",
		Summary: "worker SIGKILLed after claiming, before the side effect; after the lease another finishes it"},
		run: runCrashBeforeCall},
	{Scenario: Scenario{Name: "crash-before-commit",
		Summary: "worker SIGKILLed with the effect written but not committed: nothing half-applied"},
		run: runCrashBeforeCommit},
	{Scenario: Scenario{Name: "crash-after-call", Variants: []string{string(keyed), string(lookup), string(blind)},
		Summary: "worker SIGKILLed after the external call, before recording it; provider honours the key, can be asked, or neither (parked)"},
		run: runCrashAfterCall},
	{Scenario: Scenario{Name: "crash-after-commit",
		Summary: "worker SIGKILLed after commit, before answering; the retry replays the stored result"},
		run: runCrashAfterCommit},
	{Scenario: Scenario{Name: "duplicate-delivery",
		Summary: "every operation handed to many workers at the same instant"},
		run: runDuplicateDelivery},
	{Scenario: Scenario{Name: "retry-storm",
		Summary: "client times out three times while the server keeps working, same key; later attempts replay"},
		run: runRetryStorm},
	{Scenario: Scenario{Name: "double-enqueue",
		Summary: "the producer enqueues every job twice; the job runs once"},
		skip: skipDoubleEnqueue, run: runDoubleEnqueue},
	{Scenario: Scenario{Name: "periodic",
		Summary: "three job workers enqueue one periodic job every period while SIGKILLed at job crash points; one job per period, run once"},
		run: runPeriodic},
	{Scenario: Scenario{Name: "pause-past-lease",
		Summary: "holder SIGSTOPped past its lease, another finishes, holder resumes: its write is fenced"},
		run: runPausePastLease},
	{Scenario: Scenario{Name: "replay-batch",
		Summary: "yesterday's batch replayed inside retention (no effects) and after it (expired, detected)"},
		run: runReplayBatch},
	{Scenario: Scenario{Name: "db-restart",
		Summary: "PostgreSQL stopped hard and restarted mid-run: nothing acknowledged lost, nothing twice"},
		skip: skipDBRestart, run: runDBRestart},
	{Scenario: Scenario{Name: "failover", Variants: []string{failoverSync, failoverAsync},
		Summary: "primary SIGKILLed under ledger and job workers, its standby promoted; sync: nothing acknowledged lost; async: the loss it allows is detected"},
		skip: skipFailover, run: runFailover},
	{Scenario: Scenario{Name: "ambiguous-commit",
		Summary: "a proxy cuts connections during COMMIT and after other statements, on the ledger and jobs paths: nothing lost, nothing twice"},
		skip: skipAmbiguousCommit, run: runAmbiguousCommit},
	{Scenario: Scenario{Name: "gateway", Variants: []string{gwAttack, gwCrashKeyed, gwCrashBlind},
		Summary: "through idem serve to a counting upstream: duplicates, dropped responses, retry storms; gateways SIGKILLed after the upstream answered"},
		skip: skipGateway, run: runGateway},
	{Scenario: Scenario{Name: "broker-redelivery", Variants: brokerVariantNames(),
		Summary: "messages published twice into a real broker, consumers SIGKILLed before commit and before ack, the broker killed mid-run; Kafka (kfake, in-process): offsets in the database, a rebalancing group, the topic replayed"},
		skipVariant: skipBroker, run: runBrokerRedelivery},
	{Scenario: Scenario{Name: "multi-step", Variants: []string{string(lookup), string(blind)},
		Summary: "runs of three steps (a row, a keyed charge, a notification that can be looked up or not) with workers SIGKILLed at random step boundaries and resumed by others: each step once, blind parks honestly"},
		run: runMultiStep},
}

// Scenarios lists every scenario, in the order they run.
func Scenarios() []Scenario {
	out := make([]Scenario, len(all))
	for i, s := range all {
		out[i] = s.Scenario
	}
	return out
}

// CheckScenarios returns an error naming any of names that is not a
// scenario or a variant (of the target rows, with target).
func CheckScenarios(names []string, target bool) error {
	list := all
	if target {
		list = []scenario{targetScenario}
	}
	_, err := selectFrom(list, names)
	return err
}

// selected is one row to run: a scenario, or one of its variants.
type selected struct {
	sc      *scenario
	variant string
}

func (s selected) name() string {
	if s.variant == "" {
		return s.sc.Name
	}
	return s.sc.Name + "/" + s.variant
}

// selectScenarios expands names (a scenario selects all its variants)
// into rows, in the report's order.
func selectScenarios(names []string) ([]selected, error) { return selectFrom(all, names) }

func selectFrom(list []scenario, names []string) ([]selected, error) {
	want := map[string]bool{}
	for _, n := range names {
		for _, part := range strings.Split(n, ",") {
			if part = strings.TrimSpace(part); part != "" {
				want[part] = true
			}
		}
	}
	var out []selected
	found := map[string]bool{}
	for i := range list {
		sc := &list[i]
		variants := sc.Variants
		if len(variants) == 0 {
			variants = []string{""}
		}
		for _, v := range variants {
			s := selected{sc: sc, variant: v}
			if len(want) == 0 || want[sc.Name] || want[s.name()] {
				out = append(out, s)
				found[sc.Name], found[s.name()] = true, true
			}
		}
	}
	var unknown []string
	for n := range want {
		if !found[n] {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		var known []string
		for _, s := range list {
			known = append(known, s.Name)
		}
		return nil, fmt.Errorf("unknown scenario %s (known: %s)", strings.Join(unknown, ", "), strings.Join(known, ", "))
	}
	return out, nil
}
