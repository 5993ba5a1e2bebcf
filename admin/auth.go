package admin

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strings"
)

const (
	sessionCookie = "idem_admin"
	csrfCookie    = "idem_csrf"
)

// authorized reports whether r carries the token, as a bearer header or as
// the session cookie /login set.
func (s *server) authorized(r *http.Request) bool {
	if auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(auth)), []byte(s.o.Token)) == 1
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		return hmac.Equal([]byte(c.Value), []byte(s.session()))
	}
	return false
}

// session is the session cookie's value: a MAC of the token, so the cookie
// never holds the token itself. It changes when the process restarts.
func (s *server) session() string { return s.mac("session", s.o.Token) }

func (s *server) mac(purpose, v string) string {
	m := hmac.New(sha256.New, s.secret)
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	m.Write([]byte(v))
	return hex.EncodeToString(m.Sum(nil))
}

func (s *server) loginForm(w http.ResponseWriter, r *http.Request) {
	if s.o.Token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	s.render(w, http.StatusOK, "login.html", loginPage{Failed: r.URL.Query().Has("failed")})
}

type loginPage struct{ Failed bool }

func (s *server) login(w http.ResponseWriter, r *http.Request) {
	if s.o.Token == "" {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	tok := r.PostFormValue("token")
	if subtle.ConstantTimeCompare([]byte(tok), []byte(s.o.Token)) != 1 {
		s.log.WarnContext(r.Context(), "admin login refused", "remote", r.RemoteAddr)
		http.Redirect(w, r, "/login?failed", http.StatusSeeOther)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: s.session(), Path: "/", HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// csrfToken returns the form token for this browser, setting the cookie it
// is bound to when the browser has none. A cross-site page can neither read
// the cookie nor the token, so it cannot forge a form (signed double-submit
// cookie); Sec-Fetch-Site and Origin are checked too.
func (s *server) csrfToken(w http.ResponseWriter, r *http.Request) string {
	c, err := r.Cookie(csrfCookie)
	if err != nil || len(c.Value) != 32 {
		b := make([]byte, 16)
		rand.Read(b)
		c = &http.Cookie{Name: csrfCookie, Value: hex.EncodeToString(b), Path: "/", HttpOnly: true,
			Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode}
		http.SetCookie(w, c)
	}
	return s.mac("csrf", c.Value)
}

// csrfOK checks a POST's form token against its cookie.
func (s *server) csrfOK(r *http.Request) bool {
	c, err := r.Cookie(csrfCookie)
	if err != nil {
		return false
	}
	return hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(s.mac("csrf", c.Value)))
}
