package oaihttp

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
)

// HeaderRequestID is the request id's header, on requests and answers.
const HeaderRequestID = "X-Request-Id"

// maxRequestID bounds a client's request id that is kept.
const maxRequestID = 128

// SaneRequestID reports whether a client's request id is kept: 1 to 128
// bytes of ASCII letters, digits and ._:+=@/- (UUIDs, ULIDs, hex, and the
// ids proxies and tracers send), nothing a log or a header could be
// confused by.
func SaneRequestID(id string) bool {
	if id == "" || len(id) > maxRequestID {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.' || c == '_' || c == ':' || c == '+' || c == '=' || c == '@' || c == '/' || c == '-':
		default:
			return false
		}
	}
	return true
}

// NewRequestID returns "req_" and 32 random hex digits.
func NewRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "req_" + hex.EncodeToString(b[:])
}

// WithRequestID gives every answer of next an X-Request-Id header: the
// request's own when it is sane (one value only), else a new one. The
// request's header is set to the same id, so that next and what it
// forwards see the id the client is answered with. Install it outermost,
// so that answers written before next's handlers run (a refused
// credential) carry it too.
func WithRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ids := r.Header.Values(HeaderRequestID)
		id := ""
		if len(ids) == 1 && SaneRequestID(ids[0]) {
			id = ids[0]
		} else {
			id = NewRequestID()
			r.Header.Set(HeaderRequestID, id)
		}
		w.Header().Set(HeaderRequestID, id)
		next.ServeHTTP(w, r)
	})
}
