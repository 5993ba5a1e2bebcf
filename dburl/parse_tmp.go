package dburl

import (
	"fmt"
	"net/url"
	"strings"

	"github.com/idemdev/idem/driver/sqlite"
)

// URL is a parsed database URL. TEMPORARY: replaced by the CLI branch's Parse.
type URL struct {
	Driver      string
	Path        string
	Synchronous sqlite.Synchronous
	Conn        string
}

// Parse parses a database URL. TEMPORARY.
func Parse(s string) (URL, error) {
	switch {
	case strings.HasPrefix(s, "postgres://"), strings.HasPrefix(s, "postgresql://"), !strings.Contains(s, ":") && strings.Contains(s, "="):
		return URL{Driver: "postgres", Conn: s}, nil
	case s == "sqlite":
		return URL{Driver: "sqlite", Path: "idem.db"}, nil
	}
	scheme, rest, ok := strings.Cut(s, ":")
	if !ok || (scheme != "sqlite" && scheme != "sqlite3") {
		return URL{}, fmt.Errorf("dburl: unknown database scheme in %q", Redact(s))
	}
	rest = strings.TrimPrefix(rest, "//")
	path, q, _ := strings.Cut(rest, "?")
	u := URL{Driver: "sqlite", Path: path}
	vals, err := url.ParseQuery(q)
	if err != nil {
		return URL{}, err
	}
	if v := vals.Get("synchronous"); v != "" {
		u.Synchronous = sqlite.Synchronous(strings.ToUpper(v))
	}
	return u, nil
}

// Redact hides passwords. TEMPORARY.
func Redact(s string) string {
	if u, err := url.Parse(s); err == nil && u.User != nil {
		return u.Redacted()
	}
	return s
}

func fileURI(path string) string {
	return "file:" + (&url.URL{Path: path}).EscapedPath()
}
