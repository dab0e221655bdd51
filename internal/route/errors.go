package route

import (
	"errors"
	"net/http"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/oaihttp"
	"github.com/leasehold/leasehold/internal/tenancy"
	"github.com/leasehold/leasehold/internal/ttft"
	"github.com/leasehold/leasehold/internal/waitq"
)

// Router errors, checked with errors.Is.
var (
	// ErrUnauthorized: no bearer key, or one no tenant owns.
	ErrUnauthorized = errors.New("route: missing or unknown API key")
	// ErrForbidden: the tenant may not use the pool.
	ErrForbidden = errors.New("route: tenant may not use this model")
	// ErrUnknownModel: the request's model names no pool.
	ErrUnknownModel = errors.New("route: unknown model")
	// ErrUnknownPriority: X-Priority or "priority" names no class.
	ErrUnknownPriority = tenancy.ErrUnknownPriority
	// ErrBodyTooLarge: the body exceeds MaxBodyBytes.
	ErrBodyTooLarge = errors.New("route: request body too large")
	// ErrShuttingDown: the router is draining.
	ErrShuttingDown = errors.New("route: shutting down")
	// ErrUpstream: the engine could not be reached or failed mid-answer.
	ErrUpstream = errors.New("route: upstream engine failed")
	// ErrUpstreamTimeout: the engine did not finish within UpstreamTimeout.
	ErrUpstreamTimeout = errors.New("route: upstream engine timed out")
	// ErrContextLength: an exactly counted prompt plus max_tokens exceeds
	// every engine's context.
	ErrContextLength = errors.New("route: context length exceeded")
	// ErrPoolNotConfigured: this router has not configured the pool in
	// the ledger yet (no engine capacity known, or the ledger not
	// reachable), so it has no candidate.
	ErrPoolNotConfigured = errors.New("route: pool not configured in the ledger yet")
)

// contextLengthError is ErrContextLength with the field to blame.
type contextLengthError struct {
	param string
	msg   string
}

func (e *contextLengthError) Error() string { return e.msg }
func (e *contextLengthError) Unwrap() error { return ErrContextLength }

// apiError is an error's HTTP answer.
type apiError struct {
	status int
	typ    string
	code   string
	param  string
	msg    string
	// retryAfter, when > 0, is sent jittered as Retry-After.
	retryAfter time.Duration
}

// toAPIError maps every error the request path returns to its HTTP answer:
// the one table of statuses and codes.
//
//	validation (badRequest)          400 invalid_request_error  invalid_request (param names the field)
//	unknown priority                 400 invalid_request_error  invalid_priority
//	counted prompt + max_tokens > ctx 400 invalid_request_error  context_length_exceeded
//	ledger ReasonTooLarge            400 invalid_request_error  too_large (can never fit)
//	missing/unknown API key          401 authentication_error   invalid_api_key
//	tenant not allowed in the pool   403 permission_error       model_not_allowed
//	tenant not allowed the class     403 permission_error       priority_not_allowed (priority_policy refuse)
//	unknown model                    404 not_found_error        model_not_found
//	body too large                   413 invalid_request_error  body_too_large
//	tenant quota (Reason.Quota)      429 rate_limit_error       <reason>, Retry-After (a rate's: when its window frees)
//	tenant's queue bound (max_queued) 429 rate_limit_error      queue_full, Retry-After
//	engine's breaker open            503 capacity_error         breaker_open, Retry-After
//	no candidate meets the ttft_slo  503 capacity_error         ttft_slo, Retry-After
//	capacity (other reasons)         503 capacity_error         <reason>, Retry-After
//	fenced, ledger unreachable/error 503 service_unavailable    ledger_unavailable, Retry-After
//	lease lost while dispatching     503 service_unavailable    lease_lost
//	shutting down                    503 service_unavailable    shutting_down
//	engine unreachable / failed      502 upstream_error         upstream_error
//	engine timeout                   504 upstream_error         upstream_timeout
func toAPIError(err error) *apiError {
	var br *badRequest
	if errors.As(err, &br) {
		return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", code: "invalid_request", param: br.param, msg: br.msg}
	}
	if rej := ledger.AsRejection(err); rej != nil {
		switch {
		case rej.Reason == ledger.ReasonTooLarge:
			return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", code: string(rej.Reason), param: "max_tokens",
				msg: "the request can never fit: it needs more KV-cache tokens or slots than any engine (or the tenant's quota) allows; lower max_tokens or n"}
		case rej.Reason == ttft.ReasonSLO:
			return &apiError{status: http.StatusServiceUnavailable, typ: "capacity_error", code: string(rej.Reason),
				msg: "no engine can start this request within its priority class's ttft_slo", retryAfter: rej.RetryAfter}
		case rej.Reason.Quota():
			return &apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: string(rej.Reason),
				msg: "tenant quota exhausted: " + string(rej.Reason), retryAfter: rej.RetryAfter}
		case errors.Is(err, waitq.ErrTenantFull):
			return &apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error", code: string(rej.Reason), msg: err.Error(), retryAfter: rej.RetryAfter}
		default:
			return &apiError{status: http.StatusServiceUnavailable, typ: "capacity_error", code: string(rej.Reason),
				msg: "no engine capacity: " + string(rej.Reason), retryAfter: rej.RetryAfter}
		}
	}
	var cle *contextLengthError
	if errors.As(err, &cle) {
		return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", code: "context_length_exceeded", param: cle.param, msg: cle.msg}
	}
	switch {
	case errors.Is(err, ErrUnknownPriority):
		return &apiError{status: http.StatusBadRequest, typ: "invalid_request_error", code: "invalid_priority", param: "priority", msg: err.Error()}
	case errors.Is(err, ErrUnauthorized):
		return &apiError{status: http.StatusUnauthorized, typ: "authentication_error", code: "invalid_api_key", msg: "missing or unknown API key (Authorization: Bearer <key>)"}
	case errors.Is(err, tenancy.ErrNotAllowed):
		return &apiError{status: http.StatusForbidden, typ: "permission_error", code: tenancy.ReasonNotAllowed, param: "priority", msg: err.Error()}
	case errors.Is(err, ErrForbidden):
		return &apiError{status: http.StatusForbidden, typ: "permission_error", code: "model_not_allowed", param: "model", msg: err.Error()}
	case errors.Is(err, ErrUnknownModel):
		return &apiError{status: http.StatusNotFound, typ: "not_found_error", code: "model_not_found", param: "model", msg: err.Error()}
	case errors.Is(err, ErrBodyTooLarge):
		return &apiError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error", code: "body_too_large", msg: err.Error()}
	case errors.Is(err, ErrPoolNotConfigured):
		return &apiError{status: http.StatusServiceUnavailable, typ: "service_unavailable", code: "pool_not_configured", msg: err.Error(), retryAfter: time.Second}
	case errors.Is(err, ErrShuttingDown):
		return &apiError{status: http.StatusServiceUnavailable, typ: "service_unavailable", code: "shutting_down", msg: err.Error(), retryAfter: time.Second}
	case errors.Is(err, lease.ErrLeaseLost):
		return &apiError{status: http.StatusServiceUnavailable, typ: "service_unavailable", code: "lease_lost", msg: err.Error(), retryAfter: time.Second}
	case errors.Is(err, ErrUpstreamTimeout):
		return &apiError{status: http.StatusGatewayTimeout, typ: "upstream_error", code: "upstream_timeout", msg: err.Error()}
	case errors.Is(err, ErrUpstream):
		return &apiError{status: http.StatusBadGateway, typ: "upstream_error", code: "upstream_error", msg: err.Error()}
	}
	// Fenced, closed, unknown session, transport failure, deadline: the
	// ledger cannot confirm a grant, so admit nothing (fail-closed).
	return &apiError{status: http.StatusServiceUnavailable, typ: "service_unavailable", code: "ledger_unavailable",
		msg: "the capacity ledger is unavailable; not admitting (fail-closed)", retryAfter: time.Second}
}

// writeError answers with ae's status and an OpenAI-style body
// (internal/oaihttp).
func writeError(w http.ResponseWriter, ae *apiError) { oaihttp.WriteError(w, ae.wire()) }

func errorBody(ae *apiError) map[string]any { return oaihttp.Body(ae.wire()) }

func (ae *apiError) wire() oaihttp.Error {
	return oaihttp.Error{Status: ae.status, Type: ae.typ, Code: ae.code, Param: ae.param, Message: ae.msg, RetryAfter: ae.retryAfter,
		RetryExact: ledger.Reason(ae.code).Rate()} // a rate budget's: when its window frees
}
