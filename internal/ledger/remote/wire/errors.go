package wire

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Domains of the google.rpc.ErrorInfo attached to every error status the
// server sends.
const (
	// LedgerDomain marks errors the ledger returned; the reason names the
	// sentinel.
	LedgerDomain = "leasehold.dev/ledger"
	// AuthDomain marks errors of the reserver's authentication and
	// authorization.
	AuthDomain = "leasehold.dev/auth"
)

// Authentication and authorization errors. They are not ledger sentinels: a
// caller that sees one has a configuration problem, not a ledger outcome.
var (
	// ErrUnauthenticated: no bearer token, or one the reserver does not know.
	ErrUnauthenticated = errors.New("reserver: unauthenticated")
	// ErrPermissionDenied: the token may not make this call, or not for this
	// holder. It is the ledger's sentinel, so errors.Is holds for callers
	// that import no transport.
	ErrPermissionDenied = ledger.ErrPermissionDenied
)

// Auth ErrorInfo reasons.
const (
	ReasonUnauthenticated = "UNAUTHENTICATED"
	ReasonForbidden       = "FORBIDDEN"
	ReasonLoopbackOnly    = "LOOPBACK_ONLY"
)

// errorTable is the one mapping between ledger sentinels and gRPC codes.
// ErrorInfo.Reason carries the row's reason so the client recovers the exact
// sentinel even where several share a code. Rows are matched in order with
// errors.Is.
var errorTable = []struct {
	err    error
	code   codes.Code
	reason string
}{
	{ledger.ErrUnknownPool, codes.NotFound, "UNKNOWN_POOL"},
	{ledger.ErrUnknownEngine, codes.NotFound, "UNKNOWN_ENGINE"},
	{ledger.ErrUnknownTenant, codes.NotFound, "UNKNOWN_TENANT"},
	{ledger.ErrUnknownPriority, codes.NotFound, "UNKNOWN_PRIORITY"},
	{ledger.ErrLeaseNotFound, codes.NotFound, "LEASE_NOT_FOUND"},
	{ledger.ErrNoSession, codes.FailedPrecondition, "NO_SESSION"},
	{ledger.ErrSessionExpired, codes.FailedPrecondition, "SESSION_EXPIRED"},
	{ledger.ErrNotHolder, codes.PermissionDenied, "NOT_HOLDER"},
	{ledger.ErrRejected, codes.ResourceExhausted, "REJECTED"},
	{ledger.ErrClosed, codes.Unavailable, "CLOSED"},
	{ledger.ErrInvalidArgument, codes.InvalidArgument, "INVALID_ARGUMENT"},
	{ledger.ErrFenceExhausted, codes.FailedPrecondition, "FENCE_EXHAUSTED"},
}

// ReasonBackend is the ErrorInfo reason of an error that is none of the
// ledger's sentinels: a store or transport failure whose outcome is unknown.
const ReasonBackend = "BACKEND_FAILURE"

// Rejection metadata keys in ErrorInfo, used only when a rejection travels as
// a status rather than in a response's oneof.
const (
	mdReason     = "reason"
	mdEngine     = "engine"
	mdRetryAfter = "retry_after_ns"
	mdEpoch      = "epoch"
)

// Status returns the gRPC status for an error a ledger returned. The status
// message is err's text; the ErrorInfo names the sentinel. Context errors
// become Canceled or DeadlineExceeded; an error that already carries a gRPC
// status (a ledger that is itself remote) passes through unchanged; any
// other error is Unavailable with reason BACKEND_FAILURE (outcome unknown;
// the contract makes retrying safe).
func Status(err error) *status.Status {
	if err == nil {
		return nil
	}
	if rej := ledger.AsRejection(err); rej != nil {
		return withInfo(codes.ResourceExhausted, err.Error(), LedgerDomain, "REJECTED", map[string]string{
			mdReason:     string(rej.Reason),
			mdEngine:     string(rej.Engine),
			mdRetryAfter: strconv.FormatInt(int64(rej.RetryAfter), 10),
			mdEpoch:      strconv.FormatUint(uint64(rej.Epoch), 10),
		})
	}
	for _, row := range errorTable {
		if errors.Is(err, row.err) {
			return withInfo(row.code, err.Error(), LedgerDomain, row.reason, nil)
		}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return status.New(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.New(codes.DeadlineExceeded, err.Error())
	}
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		return st
	}
	return withInfo(codes.Unavailable, err.Error(), LedgerDomain, ReasonBackend, nil)
}

// AuthStatus returns an authentication (reason ReasonUnauthenticated) or
// authorization (ReasonForbidden, ReasonLoopbackOnly) refusal.
func AuthStatus(reason, msg string) *status.Status {
	code := codes.PermissionDenied
	if reason == ReasonUnauthenticated {
		code = codes.Unauthenticated
	}
	return withInfo(code, msg, AuthDomain, reason, nil)
}

func withInfo(code codes.Code, msg, domain, reason string, md map[string]string) *status.Status {
	st := status.New(code, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: domain, Metadata: md}); err == nil {
		return d
	}
	return st
}

// StatusError is an error status decoded by Error: its text is the server's
// message, errors.Is matches the sentinel the server named, and
// status.FromError still sees the status.
type StatusError struct {
	status   *status.Status
	sentinel error // nil when the server named none
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("%s (%s)", e.status.Message(), e.status.Code())
}

// Unwrap returns the sentinel, if any.
func (e *StatusError) Unwrap() error { return e.sentinel }

// GRPCStatus returns the status as received.
func (e *StatusError) GRPCStatus() *status.Status { return e.status }

// Error maps an error from a gRPC call back to what the ledger returned on
// the server: a *ledger.Rejection, an error matching the same sentinel with
// errors.Is, ErrUnauthenticated or ErrPermissionDenied, or ctx's error when
// the call was cancelled or timed out locally. Anything else (transport
// failure, backend failure) is returned with its status and matches no
// sentinel: its outcome is unknown.
func Error(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	if info := errorInfo(st); info != nil {
		switch info.GetDomain() {
		case LedgerDomain:
			if info.GetReason() == "REJECTED" {
				if rej, ok := rejectionFromMetadata(info.GetMetadata()); ok {
					return rej
				}
			}
			for _, row := range errorTable {
				if row.reason == info.GetReason() {
					return &StatusError{status: st, sentinel: row.err}
				}
			}
		case AuthDomain:
			if info.GetReason() == ReasonUnauthenticated {
				return &StatusError{status: st, sentinel: ErrUnauthenticated}
			}
			return &StatusError{status: st, sentinel: ErrPermissionDenied}
		}
	}
	switch st.Code() {
	case codes.Canceled, codes.DeadlineExceeded:
		if ctx != nil && ctx.Err() != nil {
			return fmt.Errorf("%w (%s)", ctx.Err(), st.Message())
		}
	case codes.Internal:
		// The client refuses to marshal a string field that is not UTF-8;
		// such an id can never reach the ledger.
		if strings.Contains(st.Message(), "invalid UTF-8") {
			return &StatusError{status: st, sentinel: ledger.ErrInvalidArgument}
		}
	case codes.Unauthenticated:
		return &StatusError{status: st, sentinel: ErrUnauthenticated}
	}
	return &StatusError{status: st}
}

func errorInfo(st *status.Status) *errdetails.ErrorInfo {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info
		}
	}
	return nil
}

func rejectionFromMetadata(md map[string]string) (*ledger.Rejection, bool) {
	ra, err1 := strconv.ParseInt(md[mdRetryAfter], 10, 64)
	ep, err2 := strconv.ParseUint(md[mdEpoch], 10, 64)
	if err1 != nil || err2 != nil || !ledger.Reason(md[mdReason]).Valid() {
		return nil, false
	}
	return &ledger.Rejection{
		Reason:     ledger.Reason(md[mdReason]),
		Engine:     ledger.EngineID(md[mdEngine]),
		RetryAfter: time.Duration(ra),
		Epoch:      ledger.Epoch(ep),
	}, true
}
