package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/dburl"
)

func TestLoggerFormatsLevelsAndRedaction(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	f := &logFlags{format: "json", level: "warn"}
	log, err := f.logger(&buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hidden")
	log.Warn("shown", "Authorization", "Bearer s3cret", "body", "card=4242", "key", "k-1")
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	if line["msg"] != "shown" || line["Authorization"] != "[redacted]" || line["body"] != "[redacted]" || line["key"] != "k-1" {
		t.Errorf("line: %v", line)
	}
	if strings.Contains(buf.String(), "s3cret") || strings.Contains(buf.String(), "hidden") {
		t.Errorf("leaked: %s", buf.String())
	}
	for _, bad := range []logFlags{{format: "xml", level: "info"}, {format: "text", level: "loud"}} {
		if _, err := bad.logger(&buf); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

// TestLedgerHashesKeysInLogs checks idem.Options.HashKeysInLogs end to
// end: the ledger's own warning carries the hash, never the key.
func TestLedgerHashesKeysInLogs(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	f := &logFlags{format: "text", level: "debug", hashKeys: true}
	log, _ := f.logger(&buf)
	ctx := context.Background()
	l, err := dburl.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "idem.db"), &idem.Options{Logger: log, HashKeysInLogs: f.hashKeys})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const key = "alice@example.com"
	if _, err := l.Claim(ctx, idem.Op{Key: key, Fingerprint: "a"}); err != nil {
		t.Fatal(err)
	}
	if c, err := l.Claim(ctx, idem.Op{Key: key, Fingerprint: "b"}); err != nil || c.Outcome != idem.Mismatch {
		t.Fatalf("%v %v", c, err)
	}
	if s := buf.String(); strings.Contains(s, key) || !strings.Contains(s, idem.KeyHash(key)) || !strings.Contains(s, "fingerprint=b") {
		t.Errorf("log: %s", s)
	}
}
