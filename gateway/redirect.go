package gateway

import (
	"io"
	"net/http"
	"net/url"
	"strings"
)

// maxFollowed bounds the redirects a guarded call follows.
const maxFollowed = 5

// followRedirects is the upstream transport for guarded calls: it follows
// a 307 or 308 whose Location is the upstream itself (a framework's
// trailing-slash redirect: POST /items to /items/) with the same method,
// body and key, and answers with where it led. Sent back to the client,
// the redirect would split one operation across two keys' requests: the
// client follows it with its key to another path (422 key-mismatch, the
// path being part of the fingerprint), or, if the Location named the
// upstream's own address, around the gateway. Followed here, the key's
// answer is the one the client wanted, stored for the request it made, and
// a retry gets it. A redirect elsewhere, or a 301, 302 or 303 (the client
// would GET; a 303 answers a request that was done), is the answer.
// Requests not guarded go as they came.
type followRedirects struct {
	base     http.RoundTripper
	upstream *url.URL
}

// RoundTrip sends req and follows the upstream's redirects to itself.
func (f followRedirects) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := f.base.RoundTrip(req)
	if callFrom(req.Context()) == nil {
		return resp, err
	}
	for range maxFollowed {
		if err != nil || (resp.StatusCode != http.StatusTemporaryRedirect && resp.StatusCode != http.StatusPermanentRedirect) {
			return resp, err
		}
		next, ok := f.within(resp)
		if !ok || (req.Body != nil && req.Body != http.NoBody && req.GetBody == nil) {
			return resp, nil
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // so the connection is reused
		resp.Body.Close()
		r := req.Clone(req.Context())
		r.URL = next // r.Host stays: empty (the URL's host), or the client's under PreserveHost
		if req.GetBody != nil {
			if r.Body, err = req.GetBody(); err != nil {
				return nil, err
			}
		}
		req = r
		resp, err = f.base.RoundTrip(req)
	}
	return resp, err
}

// within returns the Location of resp, resolved against its request, if
// it is the upstream's own (see underUpstream).
func (f followRedirects) within(resp *http.Response) (*url.URL, bool) {
	loc, err := resp.Location()
	if err != nil {
		return nil, false
	}
	_, ok := underUpstream(f.upstream, loc)
	return loc, ok
}

// underUpstream reports whether u is a URL of the upstream itself: its
// scheme and host, its path under the upstream's path prefix; rest is the
// path after the prefix.
func underUpstream(upstream, u *url.URL) (rest string, ok bool) {
	if !strings.EqualFold(u.Scheme, upstream.Scheme) || !strings.EqualFold(u.Host, upstream.Host) {
		return "", false
	}
	rest, ok = strings.CutPrefix(u.Path, strings.TrimSuffix(upstream.Path, "/"))
	return rest, ok && (rest == "" || rest[0] == '/')
}
