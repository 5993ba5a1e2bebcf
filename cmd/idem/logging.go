package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// logFlags are the logging flags a long-running or writing command takes:
// --log-format, --log-level and --hash-keys.
type logFlags struct {
	format   string
	level    string
	hashKeys bool
}

func addLogFlags(fs *flag.FlagSet, defLevel string) *logFlags {
	f := &logFlags{}
	fs.StringVar(&f.format, "log-format", envOr("IDEM_LOG_FORMAT", "text"), "log format: text or json (env IDEM_LOG_FORMAT)")
	fs.StringVar(&f.level, "log-level", envOr("IDEM_LOG_LEVEL", defLevel), "least severe level logged: debug, info, warn or error (env IDEM_LOG_LEVEL)")
	fs.BoolVar(&f.hashKeys, "hash-keys", false, "log sha256:… hashes of keys instead of the keys (idem keys show prints a key's hash)")
	return f
}

// logger builds the slog.Logger the flags describe, writing to w.
// Attributes whose names say they hold credentials or bodies are redacted,
// whatever logs them: idem itself never logs bodies or Authorization.
func (f *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", f.level)
	}
	o := &slog.HandlerOptions{Level: lvl, ReplaceAttr: redact}
	switch strings.ToLower(f.format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, o)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, o)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", f.format)
}

// sensitive names attributes whose values never reach a log.
var sensitive = map[string]bool{
	"authorization": true, "proxy-authorization": true, "cookie": true, "set-cookie": true,
	"body": true, "request_body": true, "response_body": true, "password": true, "token": true,
}

func redact(groups []string, a slog.Attr) slog.Attr {
	if sensitive[strings.ToLower(a.Key)] {
		return slog.String(a.Key, "[redacted]")
	}
	return a
}
