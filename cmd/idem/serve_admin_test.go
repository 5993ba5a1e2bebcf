package main

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemdev/idem"
)

// Two idem serve processes on one database: the admin page of the first
// shows the replay the second answered once the second has reported (in
// the background, --report-every), with the key hashed under --hash-keys.
func TestServeAdminTotalsFromEveryGateway(t *testing.T) {
	t.Parallel()
	eachServeDriver(t, func(t *testing.T, driver string) {
		db := testDB(t, driver)
		up := upstreamServer(t, newExecUpstream(false, 0))
		a := startGateway(t, nil, "--upstream", up, "--db", db, "--admin", "127.0.0.1:0", "--hash-keys", "--report-every", "200ms")
		b := startGateway(t, nil, "--upstream", up, "--db", db, "--report-every", "200ms")
		const key = "order-<7>"
		for range 2 {
			if r := sendUntilDone(t, 10*time.Second, b.url+"/charges", `{"amount":1}`, "Idempotency-Key: "+key); r.status != http.StatusCreated {
				t.Fatalf("charge: %d %s", r.status, r.body)
			}
		}
		if a.admin == "" {
			t.Fatalf("no admin address:\n%s", a.out.String())
		}
		replays := regexp.MustCompile(`id="total-replays">(\d+)<`)
		var body string
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			resp, err := http.Get(a.admin + "/?refresh=off")
			if err != nil {
				t.Fatal(err)
			}
			bb, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body = string(bb)
			if m := replays.FindStringSubmatch(body); m != nil && m[1] == "1" && strings.Contains(body, "Reporting processes: 2") {
				break
			}
		}
		if m := replays.FindStringSubmatch(body); m == nil || m[1] != "1" || !strings.Contains(body, "Reporting processes: 2") {
			t.Fatalf("A's page never showed B's replay from both reporters:\n%.3000s", body)
		}
		recent := body[strings.Index(body, `<section id="recent">`):]
		recent = recent[:strings.Index(recent, "</section>")]
		if !strings.Contains(recent, idem.KeyHash(key)) || strings.Contains(recent, "order-") {
			t.Errorf("recent list under --hash-keys:\n%s", recent)
		}
	})
}
