package prove

import (
	"context"
	"fmt"
	"strings"
)

// Cut probabilities of the ambiguous-commit proxy: a quarter of COMMITs,
// and one statement in forty otherwise, up to cutFullAt operations; past
// that, lower in proportion, so that a long run gets about as many cuts
// as one of cutFullAt operations: a cut claim that committed keeps its
// worker waiting out a lease, and workers take operations one by one.
const (
	cutCommit = 0.25
	cutRandom = 0.025
	cutFullAt = 200
)

func skipAmbiguousCommit(r *runner) string {
	switch {
	case r.db.driver != "postgres":
		return "PostgreSQL only: SQLite has no connection to cut"
	case r.db.cluster == nil || r.db.cluster.TCPAddr() == "":
		return "needs a cluster the prover starts (--db postgres): the proxy sits in front of its TCP port"
	}
	return ""
}

// runAmbiguousCommit puts a TCP proxy between the workers and PostgreSQL
// that cuts connections during COMMIT (sometimes before the server got
// it, sometimes after) and after other statements at random, and runs
// ledger workers and job workers through it (see runMixed). Every cut
// attempt is unknown to its worker, which retries with the same key: a
// replay if the commit made it, the claim back after its lease if not.
// Nothing acknowledged may be lost, nothing may happen twice.
func runAmbiguousCommit(ctx context.Context, t *trial) error {
	c := t.r.db.cluster
	scale := min(1, float64(cutFullAt)/float64(len(t.keys)))
	px, err := startCutProxy(c.TCPAddr(), uint64(t.intN(1<<62)), cutCommit*scale, cutRandom*scale)
	if err != nil {
		return err
	}
	defer px.Close()
	t.workerDB = strings.Replace(c.TCPURL(dbName), c.TCPAddr(), px.Addr(), 1)
	err = t.runMixed(ctx, 0, nil)
	t.note("%s", px.summary())
	if px.cutBefore.Load()+px.cutAfter.Load() == 0 && err == nil {
		return fmt.Errorf("the proxy cut no COMMIT: the attack did not land")
	}
	return err
}
