// Package audit owns the reserver's audit model: what is outstanding in the
// ledger, per engine how it compares with what the engine reports, and which
// of it looks wrong. The HTTP endpoint GET /v1/audit, the human page and the
// `reserver audit` CLI all show the same Report.
//
// Collect reads a ledger (Pools, Stats, List and, where the ledger has it,
// CheckTotals: read-only calls that never sweep) into an Input; Build turns an Input, at the ledger's clock, into a
// Report. Build is a pure function of its Input and Options, so the golden
// tests feed it synthetic Stats and leases with a fixed clock.
//
// The report has a per-tenant section (tenants.go): each configured
// tenant of each pool with its quota, the ledger's totals for it, and its
// leases' reservations per priority class.
//
// # Anomalies
//
//	lease_of_expired_holder  a lease whose holder's session expired (ledger
//	                         clock) but that was not yet revoked by a sweep.
//	                         Needs session knowledge: Sessions records the
//	                         KeepAlive results the reserver served; holders it
//	                         never saw are not judged.
//	deadline_passed          a lease past its deadline, not yet swept.
//	leak_suspected           on an engine with fresh telemetry, leases older
//	                         than Options.LeakAfter reserve more KV tokens
//	                         than the engine reports in use, by more than
//	                         Options.LeakMinKV and Options.LeakFraction of the
//	                         reservation: requests that finished (or never
//	                         started) without releasing their lease.
//	unaccounted_load         the engine reports more KV tokens or running
//	                         sequences than the ledger has reserved on it
//	                         (beyond Options.UnaccountedTolerance of its
//	                         capacity): load admitted around the ledger.
//	stale_telemetry          the ledger counts the engine's telemetry as
//	                         stale (or the reconciler's last scrapes failed).
//	capacity_mismatch        the engine's last observation reports less KV
//	                         capacity than the fleet file configures: the
//	                         ledger admits against the engine's figure.
//	reassert_unconfirmed     a lease re-asserted on an engine with telemetry
//	                         that no observation has shown yet
//	                         (ledger.Lease.Unconfirmed): it ends at its
//	                         deadline, no later than its reassert time plus
//	                         ConfirmWithin, unless one does.
//	totals_mismatch          an engine's or tenant's reserved totals differ
//	                         from the sum of its lease rows, compared in one
//	                         atomic read (ledger.TotalsChecker): the store's
//	                         state is inconsistent; admission reads the
//	                         totals.
//
// Every age and time-to-deadline is computed against the pool's ledger
// clock (PoolStats.Now), never the caller's.
//
// # What it does not do
//
// It changes nothing: it never sweeps, revokes or drains. Stats and List
// are separate reads, so a lease granted between them may be missing from
// the engine totals or the list for one report.
package audit
