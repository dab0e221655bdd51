package oaihttp

import (
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"
)

// Error is one OpenAI-style error answer.
type Error struct {
	Status  int
	Type    string // e.g. invalid_request_error, rate_limit_error
	Code    string // the machine-readable reason
	Param   string // the request field to blame; "" is null
	Message string
	// RetryAfter, when > 0, is sent jittered as Retry-After (JitterRetryAfter);
	// with RetryExact rounded up to whole seconds, never earlier (a rate
	// budget's window frees then, not before).
	RetryAfter time.Duration
	RetryExact bool
}

// Body is e's JSON body, {"error":{"message","type","code","param"}}; a
// streamed answer that fails after its headers ends with it as an event.
func Body(e Error) map[string]any {
	var param any
	if e.Param != "" {
		param = e.Param
	}
	return map[string]any{"error": map[string]any{"message": e.Message, "type": e.Type, "code": e.Code, "param": param}}
}

// WriteError answers with e's status, Retry-After and JSON body.
func WriteError(w http.ResponseWriter, e Error) {
	if e.RetryAfter > 0 {
		s := JitterRetryAfter(e.RetryAfter)
		if e.RetryExact {
			s = int((e.RetryAfter + time.Second - 1) / time.Second)
		}
		w.Header().Set("Retry-After", strconv.Itoa(s))
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(Body(e))
}

// JitterRetryAfter spreads a hint over 0.5-1.5× and rounds up to whole
// seconds, at least 1, so that refused clients do not retry in step.
func JitterRetryAfter(d time.Duration) int {
	j := time.Duration(float64(d) * (0.5 + rand.Float64()))
	return max(1, int((j+time.Second-1)/time.Second))
}
