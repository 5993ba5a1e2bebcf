package dburl

import (
	"net/url"
	"strings"
)

// Hidden replaces every secret Redact hides.
const Hidden = "xxxxx"

// Redact returns s with every password hidden, for logs, errors and
// output. It reads any URL (the userinfo of any scheme: mysql://u:PW@h,
// multi-host postgres://u:PW@h1,h2/db), query parameters that name a
// secret (password, sslpassword, and names holding "pass", "secret" or
// "token"), and libpq keyword strings (password=PW, password='P W').
// It never fails: what it cannot read after a keyword is hidden whole.
// Redact is for connection strings, not for arbitrary text.
func Redact(s string) string {
	if i := strings.Index(s, "://"); i >= 0 && isScheme(s[:i]) {
		return redactURL(s, i+3)
	}
	if looksLikeKeywords(s) {
		return redactKeywords(s)
	}
	// An opaque URL (sqlite:idem.db?password=…) or a path: only a query
	// can hold a secret.
	if i := strings.IndexByte(s, '?'); i >= 0 {
		return s[:i+1] + redactQuery(s[i+1:])
	}
	return s
}

// redactURL hides the password in the userinfo of what follows
// "scheme://" (from) and secret query parameters. A userinfo with a
// password runs to the last "@": the password may hold an unescaped "@",
// "/" or "?", and taking too much as userinfo only hides more. When that
// would take in what reads as a query (a "?" followed by "="), the last
// "@" may be in a query value (?password=p@ss): with no ":" before the
// query there is no password in a userinfo, so the userinfo, if any, ends
// at the first "@" before the path or query and the query is redacted as
// a query; with one (a port, or a password holding "?" and "="), the two
// readings cannot be told apart and everything after the scheme is hidden.
func redactURL(s string, from int) string {
	head, rest := s[:from], s[from:]
	at := strings.LastIndexByte(rest, '@')
	if q := strings.IndexByte(rest, '?'); at >= 0 && q >= 0 && q < at && strings.Contains(rest[q:at], "=") {
		if c := strings.IndexByte(rest, ':'); c >= 0 && c < q {
			return head + Hidden
		}
		authority := rest
		if end := strings.IndexAny(rest, "/?"); end >= 0 {
			authority = rest[:end]
		}
		at = strings.IndexByte(authority, '@')
	}
	if at >= 0 {
		user := rest[:at]
		if c := strings.IndexByte(user, ':'); c >= 0 {
			user = user[:c+1] + Hidden
		}
		head += user + "@"
		rest = rest[at+1:]
	}
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		return head + rest[:i+1] + redactQuery(rest[i+1:])
	}
	return head + rest
}

// redactQuery hides the values of secret parameters in a query string.
func redactQuery(q string) string {
	pairs := strings.Split(q, "&")
	for i, p := range pairs {
		k, _, hasValue := strings.Cut(p, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			name = k
		}
		if hasValue && secretName(name) {
			pairs[i] = k + "=" + Hidden
		}
	}
	return strings.Join(pairs, "&")
}

// redactKeywords hides the values of secret keywords in a libpq keyword
// string. Past a syntax error, everything is hidden: a value that cannot
// be delimited cannot be shown safely.
func redactKeywords(s string) string {
	pairs, stop, err := splitKeywords(s)
	var b strings.Builder
	last := 0
	for _, p := range pairs {
		// "user= password=PW" gives user the value "password=PW" (an
		// empty value needs ''); hide it too, as a typo's secret.
		if secretName(p.key) || secretName(strings.SplitN(p.value, "=", 2)[0]) && strings.Contains(p.value, "=") {
			b.WriteString(s[last:p.start])
			b.WriteString(Hidden)
			last = p.end
		}
	}
	if err != nil {
		b.WriteString(s[last:stop])
		b.WriteString(Hidden)
		return b.String()
	}
	b.WriteString(s[last:])
	return b.String()
}

// secretName reports whether a parameter or keyword holds a secret.
func secretName(name string) bool {
	n := strings.ToLower(strings.TrimSpace(name))
	return strings.Contains(n, "pass") || n == "pwd" || strings.Contains(n, "secret") || strings.Contains(n, "token")
}
