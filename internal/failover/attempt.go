package failover

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"net"
	"strconv"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Attempt is what the router saw of one dispatch to an engine.
type Attempt struct {
	// Status is the engine's HTTP status; 0 while no response headers
	// came.
	Status int
	// Err is the transport error that ended the exchange (sending, or
	// reading the answer); nil when the answer was read to its end or it
	// was never sent.
	Err error
	// FirstByteTimeout: no response headers within the pool's
	// first_byte_timeout (FirstByte fired).
	FirstByteTimeout bool
	// Cancelled: the router or the client ended the exchange (the client
	// left, the lease ended, the request's deadline passed).
	Cancelled bool
	// TTFTBreach: the first token came later than the class's ttft_slo
	// (ttft.Estimator.Breached).
	TTFTBreach bool
}

// Outcome is a's evidence for the engine's breaker (see the package doc).
func (a Attempt) Outcome() ledger.Outcome {
	switch {
	case a.Status >= 500:
		return ledger.OutcomeStatus5xx
	case a.Status > 0:
		if a.Err != nil && !a.Cancelled {
			return ledger.OutcomeReset // the answer broke off
		}
		if a.TTFTBreach {
			return ledger.OutcomeTTFTBreach
		}
		return ledger.OutcomeOK
	case a.FirstByteTimeout:
		return ledger.OutcomeFirstByteTimeout
	case a.Cancelled || a.Err == nil:
		return ledger.OutcomeNone
	case connectFailed(a.Err):
		return ledger.OutcomeConnect
	}
	return ledger.OutcomeReset
}

// Retryable reports whether the request may go to another engine after a,
// provided nothing of a was written to the client.
func (a Attempt) Retryable() bool {
	switch a.Outcome() {
	case ledger.OutcomeConnect, ledger.OutcomeReset, ledger.OutcomeFirstByteTimeout:
		return true
	case ledger.OutcomeStatus5xx:
		return RetryStatus(a.Status)
	}
	return false
}

// RetryStatus reports whether an engine's status says the engine, not the
// request, failed: 500, 502, 503, 504.
func RetryStatus(status int) bool {
	switch status {
	case 500, 502, 503, 504:
		return true
	}
	return false
}

// connectFailed reports whether err says no connection to the engine
// could be made: a dial error (refused, unreachable, dial timeout), a
// name that does not resolve, or a TLS handshake that failed.
func connectFailed(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var (
		dns    *net.DNSError
		verify *tls.CertificateVerificationError
		record tls.RecordHeaderError
	)
	return errors.As(err, &dns) || errors.As(err, &verify) || errors.As(err, &record)
}

// NewRequestID draws a request's base id: 32 random hex digits. It is
// never derived from the client's X-Request-Id: two requests under one id
// would share one lease (Acquire replays it).
func NewRequestID() ledger.RequestID {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return ledger.RequestID(hex.EncodeToString(b[:]))
}

// RequestID is attempt n's (1-based) idempotency key: base for the first,
// "<base>#n" after (see the package doc).
func RequestID(base ledger.RequestID, n int) ledger.RequestID {
	if n <= 1 {
		return base
	}
	return base + ledger.RequestID("#"+strconv.Itoa(n))
}

// Without returns cands without the engines in failed, in cands' order,
// in a new slice.
func Without(cands, failed []ledger.EngineID) []ledger.EngineID {
	out := make([]ledger.EngineID, 0, len(cands))
	for _, c := range cands {
		dead := false
		for _, f := range failed {
			dead = dead || c == f
		}
		if !dead {
			out = append(out, c)
		}
	}
	return out
}
