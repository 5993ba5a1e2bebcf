package dburl

import (
	"fmt"
	"net/url"
	"strings"
)

// A libpq keyword/value connection string is "key=value" pairs separated
// by white space; a value is either a run of non-space characters or
// single-quoted, and within either a backslash escapes the next character
// (libpq's "Keyword/Value Connection Strings"). pgx reads the same syntax.
// idem reads it itself rather than import pgx: this package must not pull
// a database driver into its importers. The splitter below only splits;
// what the keywords mean is left to pgx, which receives them unchanged
// (as URL query parameters).

// kv is one keyword/value pair, with where its value sits in the input.
type kv struct {
	key, value string
	start, end int // the value's bytes in the input, quotes included
}

// looksLikeKeywords reports whether s starts like a keyword string:
// optional space, a keyword, optional space, "=".
func looksLikeKeywords(s string) bool {
	s = strings.TrimLeft(s, " \t\n\r\f\v")
	n := 0
	for n < len(s) && (s[n] == '_' || s[n] >= 'a' && s[n] <= 'z' || s[n] >= 'A' && s[n] <= 'Z' || n > 0 && s[n] >= '0' && s[n] <= '9') {
		n++
	}
	return n > 0 && strings.HasPrefix(strings.TrimLeft(s[n:], " \t\n\r\f\v"), "=")
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

// splitKeywords splits a keyword string. On a syntax error it returns the
// pairs read so far, the offset where reading stopped, and the error; the
// error names at most a keyword, never a value.
func splitKeywords(s string) ([]kv, int, error) {
	var out []kv
	i := 0
	for {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i == len(s) {
			return out, i, nil
		}
		keyStart := i
		for i < len(s) && s[i] != '=' && !isSpace(s[i]) {
			i++
		}
		key := s[keyStart:i]
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i == len(s) || s[i] != '=' || key == "" {
			return out, keyStart, fmt.Errorf("dburl: connection string: want keyword=value at byte %d", keyStart)
		}
		i++
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		start := i
		var b strings.Builder
		if i < len(s) && s[i] == '\'' {
			i++
			closed := false
			for i < len(s) {
				c := s[i]
				if c == '\\' && i+1 < len(s) {
					b.WriteByte(s[i+1])
					i += 2
					continue
				}
				i++
				if c == '\'' {
					closed = true
					break
				}
				b.WriteByte(c)
			}
			if !closed {
				return out, keyStart, fmt.Errorf("dburl: connection string: unterminated quoted value of %q", key)
			}
		} else {
			for i < len(s) && !isSpace(s[i]) {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				b.WriteByte(s[i])
				i++
			}
		}
		out = append(out, kv{key: key, value: b.String(), start: start, end: i})
	}
}

// parseKeywords reads a keyword string into a URL whose ConnString is the
// equivalent postgres:// URL: every setting but the pool's becomes a query
// parameter, which libpq and pgx read like the keyword itself.
func parseKeywords(s string) (URL, error) {
	pairs, _, err := splitKeywords(s)
	if err != nil {
		return URL{}, err
	}
	u := URL{Driver: Postgres}
	var q []string
	for _, p := range pairs {
		if strings.HasPrefix(p.key, "pool_") || p.key == "pooler" {
			if err := u.Pool.set(p.key, p.value); err != nil {
				return URL{}, err
			}
			continue
		}
		q = append(q, queryEscape(p.key)+"="+queryEscape(p.value))
	}
	u.ConnString = "postgres://"
	if len(q) > 0 {
		u.ConnString += "?" + strings.Join(q, "&")
	}
	return u, nil
}

// queryEscape escapes a query parameter as libpq decodes it: %HH only, so
// a space is %20 (libpq does not read "+" as a space).
func queryEscape(s string) string {
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}
