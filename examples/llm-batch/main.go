// Command llm-batch runs a batch of chat-completion requests against an
// OpenAI-compatible endpoint, calling the model at most once per distinct
// input: the seed's own case.
//
// Each request is keyed by the fingerprint of what changes the answer —
// model, messages and sampling parameters — with the request's own id and
// idempotency key left out, so a batch that is killed and rerun, or that
// holds the same prompt twice, does each distinct piece of work once. The
// answer is written to the results table in the same transaction as the
// ledger's done mark, and the key is sent to the endpoint as
// Idempotency-Key, so a provider that deduplicates covers the one gap left
// (a crash after the call, before the commit). The fingerprint is on every
// log line.
//
// Do not key work this way when each run must draw a fresh sample for the
// same input (temperature > 0 and you want variety): the second run would
// get the first run's answer.
//
//	go run ./examples/llm-batch --endpoint http://127.0.0.1:8000 --db batch.db batch.jsonl
package main

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/idemdev/idem"
	"github.com/idemdev/idem/driver/sqlite"
	"github.com/idemdev/idem/fingerprint"
	_ "modernc.org/sqlite"
)

// Request is one line of the batch: an OpenAI-style chat request.
type Request struct {
	// ID names the line for the operator; it is not part of the work.
	ID          string    `json:"id"`
	Model       string    `json:"model"`
	Messages    []Message `json:"messages"`
	Temperature float64   `json:"temperature"`
	MaxTokens   int       `json:"max_tokens,omitempty"`
	// IdempotencyKey, if a caller put one in the body, is not part of the
	// work either.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
}

// Message is one chat message.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// workFingerprint is the key of a request: what changes the model's answer.
var workFingerprint = []fingerprint.Option{
	fingerprint.Exclude("/id"),
	fingerprint.Exclude("/idempotency_key"),
}

func main() {
	endpoint := flag.String("endpoint", "", "base `URL` of an OpenAI-compatible API (required)")
	db := flag.String("db", "llm-batch.db", "SQLite `file` holding the ledger and the results")
	lease := flag.Duration("lease", 30*time.Second, "how long a call is trusted without a heartbeat; a killed run's claim is taken over after it")
	flag.Parse()
	if *endpoint == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: llm-batch --endpoint URL [--db FILE] BATCH.jsonl")
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(context.Background(), *endpoint, *db, flag.Arg(0), *lease, log); err != nil {
		log.Error("batch failed", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, endpoint, dbPath, batchPath string, lease time.Duration, log *slog.Logger) error {
	db, err := sql.Open("sqlite", "file:"+dbPath+"?_txlock=immediate&_pragma=busy_timeout(10000)")
	if err != nil {
		return err
	}
	defer db.Close()
	l, err := idem.New(ctx, sqlite.New(db, nil), &idem.Options{Logger: log, Lease: lease})
	if err != nil {
		return err
	}
	defer l.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS results (
	fingerprint TEXT PRIMARY KEY, request_id TEXT NOT NULL, answer TEXT NOT NULL)`); err != nil {
		return err
	}
	f, err := os.Open(batchPath)
	if err != nil {
		return err
	}
	defer f.Close()
	client := &http.Client{Timeout: 30 * time.Second}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; sc.Scan(); line++ {
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		if err := handle(ctx, l, client, endpoint, raw, log); err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
	}
	return sc.Err()
}

// handle runs one request at most once per distinct input.
func handle(ctx context.Context, l *idem.Ledger, client *http.Client, endpoint string, raw []byte, log *slog.Logger) error {
	var req Request
	if err := json.Unmarshal(raw, &req); err != nil {
		return err
	}
	fp, err := fingerprint.Sum(raw, workFingerprint...)
	if err != nil {
		return err
	}
	log = log.With("fingerprint", fp, "request", req.ID)
	op := idem.Op{Scope: "llm-batch", Key: fp, Fingerprint: fp}
	call := func(ctx context.Context, tx *sql.Tx) ([]byte, error) {
		log.Info("calling the model")
		answer, err := complete(ctx, client, endpoint, fp, req)
		if err != nil {
			return nil, err // released: a rerun tries again
		}
		// The answer and the done mark commit together.
		_, err = tx.ExecContext(ctx, `INSERT INTO results (fingerprint, request_id, answer) VALUES (?, ?, ?)`, fp, req.ID, answer)
		return []byte(answer), err
	}
	res, err := l.Do(ctx, op, call)
	var busy *idem.ConflictError
	for errors.As(err, &busy) && errors.Is(err, idem.ErrInFlight) {
		// Another run holds it, or a killed run did: once its lease ends,
		// the claim is taken over and the call made again with the same
		// key (which the provider deduplicates).
		wait := max(time.Until(busy.Record.LeaseUntil), 0) + 100*time.Millisecond
		log.Info("in flight elsewhere; waiting for its lease", "wait", wait.Round(time.Millisecond))
		time.Sleep(wait)
		res, err = l.Do(ctx, op, call)
	}
	if err != nil {
		return err
	}
	if res.Replayed {
		log.Info("already done; not calling the model")
	} else {
		log.Info("answered", "bytes", len(res.Body))
	}
	return nil
}

// complete calls the chat-completions endpoint with the work's fingerprint
// as the Idempotency-Key.
func complete(ctx context.Context, client *http.Client, endpoint, key string, req Request) (string, error) {
	body, err := json.Marshal(map[string]any{"model": req.Model, "messages": req.Messages, "temperature": req.Temperature, "max_tokens": req.MaxTokens})
	if err != nil {
		return "", err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Idempotency-Key", key)
	resp, err := client.Do(hr)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return "", fmt.Errorf("model endpoint: %s: %s", resp.Status, b)
	}
	var out struct {
		Choices []struct {
			Message Message `json:"message"`
		} `json:"choices"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", err
	}
	if len(out.Choices) == 0 {
		return "", errors.New("model endpoint: no choices")
	}
	return out.Choices[0].Message.Content, nil
}
