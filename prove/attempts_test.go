package prove

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// A trial that ends inconclusive (a fault outside idem) runs again, each
// time on a new scope and a new queue (the inbox's source: the message IDs
// repeat, so on the first attempt's queue the next attempt's messages were
// dead-lettered as changed payloads), up to maxAttempts in all; inconclusive every time,
// it is skipped with its reason, and the progress says each rerun.
func TestInconclusiveRunsAgain(t *testing.T) {
	t.Parallel()
	var scopes, dests []string
	sc := &scenario{Scenario: Scenario{Name: "flaky-broker"}, run: func(ctx context.Context, tr *trial) error {
		scopes = append(scopes, tr.scope)
		dests = append(dests, tr.brokerDest())
		return inconclusive{"the broker lost its queue"}
	}}
	var out bytes.Buffer
	r := &runner{cfg: Config{Ops: 1}, db: &database{driver: "sqlite"}, runID: "test", prog: newProgress(&out, false, 1)}
	res := r.runTrial(context.Background(), 0, selected{sc: sc})
	if len(scopes) != maxAttempts || !res.Skipped || !strings.Contains(res.Reason, "inconclusive: the broker lost its queue (attempt 3 of 3") {
		t.Fatalf("%d attempts, result %+v", len(scopes), res)
	}
	if strings.Count(out.String(), "running it again") != maxAttempts-1 || scopes[0] == scopes[1] || scopes[1] == scopes[2] {
		t.Fatalf("progress %q, scopes %q", out.String(), scopes)
	}
	if dests[0] == dests[1] || dests[1] == dests[2] || dests[0] == dests[2] {
		t.Fatalf("queues %q: want one per attempt", dests)
	}
}
