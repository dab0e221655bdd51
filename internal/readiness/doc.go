// Package readiness says why a router does not admit now, one cause a
// line, for its /readyz: a pool not configured in the ledger (and why), a
// holder session not confirmed, a pool in the ledger's recovery window
// none of whose engines has recovered yet (where every new grant is
// refused with ReasonRecovering), with the engines left out of their
// pools; none when it admits.
//
// It owns the wording and the order only: what is pending, confirmed or
// recovering is the fleet applier's and the lease manager's to say, read
// through the two small interfaces below at the moment of the probe. A
// router that says "ready" may still be refused a grant a moment later
// (a window opened by a new epoch is seen at the next keepalive); one that
// says "recovering" is refused every grant until the window it names ends
// or an engine recovers (seen at the next keepalive).
package readiness
