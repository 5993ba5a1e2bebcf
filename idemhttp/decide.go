package idemhttp

import (
	"cmp"
	"net/http"
)

// action is what becomes of a key once its handler has answered.
type action int

const (
	actStore     action = iota + 1 // record the response for replay
	actNotStored                   // record that the key is done but its response cannot be replayed
	actRelease                     // free the key: the effect did not happen
	actLeave                       // leave the claim to its lease: outcome unknown
)

// decide applies, in order: what the handler said (Release, Unknown), the
// statuses that release the key (429, …), the 5xx policy, and whether the
// response could be kept.
func (g *guard) decide(ctl *control, rec *recorder) action {
	switch verdict(ctl.verdict.Load()) {
	case verdictRelease:
		return actRelease
	case verdictUnknown:
		return actLeave
	}
	status := cmp.Or(rec.status, http.StatusOK)
	if g.cfg.release[status] {
		return actRelease
	}
	if status >= 500 {
		switch g.cfg.serverErrors {
		case Release5xx:
			return actRelease
		case Hold5xx:
			return actLeave
		}
	}
	if !rec.held() || rec.tooLarge {
		return actNotStored
	}
	return actStore
}

// notStoredReason says why a response that is not held was not stored.
func (rec *recorder) notStoredReason() string {
	if rec.passing != "" {
		return rec.passing
	}
	return notStoredTooLarge
}
