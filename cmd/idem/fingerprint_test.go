package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFingerprintCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "req.json")
	if err := os.WriteFile(file, []byte(`{"b":[1.0,2e21,"\u00e9"],"a":-0}`), 0o600); err != nil {
		t.Fatal(err)
	}
	const briefOut = "{\"a\":0,\"b\":[1,2e+21,\"é\"]}\njcs-sha256:fc5d73f26a7f20ad8fd9463cf7552d6703a2d7fc9d22fd9cb23b5c3541e0a428\n"

	tests := []struct {
		name       string
		args       []string
		stdin      string
		code       int
		stdout     string // exact, unless empty
		stdoutHas  string
		stderrHas  string
		stderrNone bool
	}{
		{name: "stdin", stdin: "{\"b\":[1.0,2e21,\"\\u00e9\"],\"a\":-0}\n", stdout: briefOut, stderrNone: true},
		{name: "file", args: []string{file}, stdout: briefOut, stderrNone: true},
		{name: "dash is stdin", args: []string{"-"}, stdin: `{"a":-0,"b":[1,2e21,"é"]}`, stdout: briefOut},
		{
			name:   "exclude repeated",
			args:   []string{"--exclude", "/request_id", "--exclude=/items/*/at"},
			stdin:  `{"request_id":"r-1","items":[{"id":1,"at":"x"}]}`,
			stdout: "{\"items\":[{\"id\":1}]}\n",
		},
		{name: "collapse space", args: []string{"--collapse-space"}, stdin: `{"n":"  a   b "}`, stdoutHas: "{\"n\":\"a b\"}\n"},
		{name: "trim space", args: []string{"--trim-space"}, stdin: `{"n":"  a   b "}`, stdoutHas: "{\"n\":\"a   b\"}\n"},
		{name: "nfc", args: []string{"--nfc"}, stdin: `{"e\u0301":"o\u0308"}`, stdoutHas: "{\"é\":\"ö\"}\n"},
		{name: "invalid JSON", stdin: "{\n  \"a\": 1,\n  \"a\": 2\n}", code: 2, stderrHas: `<stdin>:3:3: invalid JSON at offset 14: duplicate key "a"`},
		{name: "invalid JSON in file", args: []string{file + "x"}, code: 2, stderrHas: "no such file"},
		{name: "empty input", code: 2, stderrHas: "offset 0: empty input"},
		{name: "bad pointer", args: []string{"--exclude", "request_id"}, stdin: `{}`, code: 2, stderrHas: `invalid JSON pointer "request_id"`},
		{name: "bad flag", args: []string{"--bogus"}, code: 2, stderrHas: "flag provided but not defined"},
		{name: "two files", args: []string{file, file}, code: 2, stderrHas: "at most one FILE"},
		{name: "number kept exact", stdin: `{"to_account":9007199254740993}`, stdout: "{\"to_account\":9007199254740993}\n",
			stderrHas: "note: /to_account: 9007199254740993 kept exact; RFC 8785 would write 9007199254740992"},
		{name: "number beyond float64", stdin: `1e400`, stdout: "1e+400\n", stderrHas: "note: (the document): 1e+400 kept exact; RFC 8785 has no form for it"},
		{name: "http", args: []string{"--http", "POST", "/charges?x=1"}, stdin: `{"b":1,"a":2}`,
			stdout: "idemhttp/v1\nPOST\n/charges\nx=1\njcs-sha256:", stdoutHas: "\nhttp-sha256:", stderrNone: true},
		{name: "http exact number", args: []string{"--http", "POST", "/p"}, stdin: `{"to":9007199254740993}`, stdoutHas: "\nhttp-sha256:", stderrHas: "note: /to: 9007199254740993 kept exact"},
		{name: "http body not JSON", args: []string{"--http", "POST", "/p"}, stdin: `{"a":1,"a":2}`, code: 2, stderrHas: "Content-Type is application/json but the body is not JSON (the gateway answers 400)"},
		{name: "http without path", args: []string{"--http", "POST"}, code: 2, stderrHas: "--http needs METHOD and PATH"},
		{name: "http bad path", args: []string{"--http", "POST", "charges"}, code: 2, stderrHas: "want a request target"},
		{name: "http two files", args: []string{"--http", "POST", "/p", file, file}, code: 2, stderrHas: "at most one FILE"},
		{name: "http with nfc", args: []string{"--http", "--nfc", "POST", "/p"}, code: 2, stderrHas: "--http takes only --exclude and --content-type"},
		{name: "content type without http", args: []string{"--content-type", "application/json"}, code: 2, stderrHas: "--content-type needs --http"},
		{name: "help", args: []string{"--help"}, code: 0, stdoutHas: "Usage: idem fingerprint", stderrNone: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdout, stderr bytes.Buffer
			code := runFingerprint(context.Background(), tt.args, strings.NewReader(tt.stdin), &stdout, &stderr)
			if code != tt.code {
				t.Errorf("exit code %d, want %d (stderr %q)", code, tt.code, stderr.String())
			}
			if tt.stdout != "" && !strings.HasPrefix(stdout.String(), tt.stdout) {
				t.Errorf("stdout %q, want it to start with %q", stdout.String(), tt.stdout)
			}
			if tt.stdout == briefOut && stdout.String() != briefOut {
				t.Errorf("stdout %q, want %q", stdout.String(), briefOut)
			}
			if !strings.Contains(stdout.String(), tt.stdoutHas) {
				t.Errorf("stdout %q, want it to contain %q", stdout.String(), tt.stdoutHas)
			}
			if !strings.Contains(stderr.String(), tt.stderrHas) {
				t.Errorf("stderr %q, want it to contain %q", stderr.String(), tt.stderrHas)
			}
			if tt.stderrNone && stderr.Len() > 0 {
				t.Errorf("stderr %q, want nothing", stderr.String())
			}
			if tt.code != 0 && stdout.Len() > 0 && tt.name != "help" {
				t.Errorf("stdout %q on failure, want nothing", stdout.String())
			}
		})
	}
}

func TestFingerprintRegistered(t *testing.T) {
	t.Parallel()
	c, ok := commands["fingerprint"]
	if !ok || c.run == nil || !strings.HasPrefix(c.usage, "idem fingerprint") {
		t.Fatalf("fingerprint command not registered: %+v", c)
	}
}
