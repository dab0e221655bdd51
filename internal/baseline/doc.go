// Package baseline is the router's --admission=local: the BASELINE of
// today's routers, kept only to measure the gap Leasehold closes. Each
// router admits against the last scrape of the engines' /metrics (KV
// tokens in use, requests running and waiting) plus its own dispatches
// since, with nothing shared, so N routers over-admit. It ignores tenant
// quotas and priorities, and its grants (lease.Ticket) are never revoked.
//
// Not here: the shared ledger (internal/ledger, internal/lease), which is
// what a router uses by default.
package baseline
