package dburl_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/idemdev/idem/dburl"
)

func TestRedact(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"postgres://u:S3CRET@h:5432/db?sslmode=disable", "postgres://u:xxxxx@h:5432/db?sslmode=disable"},
		{"mysql://u:S3CRET@h/db", "mysql://u:xxxxx@h/db"},
		{"postgres://u:S3CRET@h1:5432,h2:5433/db?target_session_attrs=read-write", "postgres://u:xxxxx@h1:5432,h2:5433/db?target_session_attrs=read-write"},
		{"postgres://u:S3/C@RET@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://h/db?user=u&password=S3CRET&sslpassword=S3CRET", "postgres://h/db?user=u&password=xxxxx&sslpassword=xxxxx"},
		{"sqlite:idem.db?password=S3CRET", "sqlite:idem.db?password=xxxxx"},
		{"host=h password=S3CRET dbname=d", "host=h password=xxxxx dbname=d"},
		{"host=h password = 'S3 CR\\'ET' dbname=d", "host=h password = xxxxx dbname=d"},
		{"host=h password='S3CRET", "host=h xxxxx"},
		{"postgres://u@h/db", "postgres://u@h/db"},
		{"postgres://u@h/db?password=p@ss", "postgres://u@h/db?password=xxxxx"},
		{"postgres://h/db?sslpassword=ab@cd", "postgres://h/db?sslpassword=xxxxx"},
		{"postgres://h:5432/db?password=p@ss", "postgres://xxxxx"},                   // a port or a password? hide all
		{"postgres://u:S3CRET@h:5432/db?user=a@b&password=p@ss", "postgres://xxxxx"}, // likewise
		{"sqlite:idem.db", "sqlite:idem.db"},
	} {
		if got := dburl.Redact(tc.in); got != tc.want {
			t.Errorf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzRedact builds connection strings of every form around a password
// and checks that no form of it survives Redact.
func FuzzRedact(f *testing.F) {
	f.Add("u", "S3CRET", "db.example")
	f.Add("", "p@ss/w?rd#", "h1:5432,h2:5433")
	f.Add("admin", "it's a \\ secret", "localhost")
	f.Fuzz(func(t *testing.T, user, pw, host string) {
		if len(pw) < 4 || strings.TrimSpace(pw) != pw || strings.ContainsAny(user+host, "@:?&=#/ '\\\x00") || strings.ContainsAny(pw, "\x00") {
			t.Skip()
		}
		// A query value written raw (not escaped) can hold "@" and ":";
		// only "&", "#" and spaces would end it.
		raw := !strings.ContainsAny(pw, "&# \t\n\r\f\v")
		forms := func(pw string) []string {
			quoted := "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw) + "'"
			out := []string{
				"postgres://" + url.UserPassword(user, pw).String() + "@" + host + "/db?sslmode=disable",
				"mysql://" + url.UserPassword(user, pw).String() + "@" + host + "/db",
				"postgres://" + user + ":" + pw + "@" + host + "/db", // not escaped at all
				"postgres://" + host + "/db?user=" + url.QueryEscape(user) + "&password=" + url.QueryEscape(pw),
				"postgres://" + host + "/db?sslpassword=" + url.QueryEscape(pw) + "&sslmode=require",
				"sqlite:idem.db?password=" + url.QueryEscape(pw),
				"host=" + host + " user=" + user + " password=" + quoted + " dbname=d",
				"password=" + quoted,
				"host=" + host + " password=" + strings.NewReplacer(`\`, `\\`, " ", `\ `, "\t", "\\\t", "\n", "\\\n", "\r", "\\\r", "\f", "\\\f", "\v", "\\\v").Replace(pw) + " dbname=d",
			}
			if raw {
				out = append(out, "postgres://"+host+"/db?password="+pw, "postgres://"+user+"@"+host+"/db?sslmode=disable&password="+pw)
			}
			return out
		}
		secrets := []string{pw, url.QueryEscape(pw), url.PathEscape(pw), url.UserPassword("", pw).String()[1:]}
		placeholder := forms("\x01")
		for i, s := range forms(pw) {
			got := dburl.Redact(s)
			for _, secret := range secrets {
				if strings.Contains(placeholder[i], secret) || strings.Contains(dburl.Hidden, secret) {
					continue // the template itself holds it (a password like "host")
				}
				if strings.Contains(got, secret) {
					t.Fatalf("Redact(%q) = %q shows %q", s, got, secret)
				}
			}
		}
	})
}
