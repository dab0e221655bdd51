package oaihttp

import (
	"net/http"
	"strings"
)

// methods are those NotServed tries when it looks for the ones a path
// takes (HEAD is GET's).
var methods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// NotServed is mux's catch-all: register it as mux's "/" pattern, so that
// a request no other pattern matches is answered as OpenAI would, with
// JSON: 405 method_not_allowed and an Allow header when another method of
// the path is served, else 404 unknown_url. served lists what is, for
// the 404's message.
func NotServed(mux *http.ServeMux, served string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var allow []string
		for _, m := range methods {
			probe := r.WithContext(r.Context())
			probe.Method = m
			if _, pattern := mux.Handler(probe); pattern != "" && pattern != "/" {
				allow = append(allow, m)
			}
		}
		what := r.Method + " " + r.URL.EscapedPath()
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			WriteError(w, Error{Status: http.StatusMethodNotAllowed, Type: "invalid_request_error", Code: "method_not_allowed",
				Message: "Invalid method (" + what + "): this path takes " + strings.Join(allow, ", ")})
			return
		}
		WriteError(w, Error{Status: http.StatusNotFound, Type: "invalid_request_error", Code: "unknown_url",
			Message: "Invalid URL (" + what + "): this router serves " + served})
	}
}
