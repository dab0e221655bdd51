package ledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
)

// The ledger keeps per-engine and per-tenant totals of its leases (what
// admission reads) beside the lease rows themselves. They are changed in
// the same atomic step, so at every instant each total equals the sum of
// its rows. TotalsChecker reads both in one atomic read and reports any
// difference: the conformance suite calls it after every operation under
// load, and the reserver's audit reports a difference as totals_mismatch.

// TotalsChecker is the optional capability of a Ledger to compare, in one
// atomic read, each engine's and tenant's recorded totals with the sum of
// their lease rows. Every backend implements it; check for it with a type
// assertion or call CheckTotals.
type TotalsChecker interface {
	// CheckTotals returns every mismatch in pool, none when the totals
	// equal the rows; ErrUnknownPool when the pool does not exist.
	CheckTotals(ctx context.Context, pool PoolID) ([]TotalsMismatch, error)
}

// Totals are what a ledger counts for an engine or a tenant.
type Totals struct {
	KVTokens int64
	Slots    int64
	Leases   int64
}

// Add adds l's amounts and one lease.
func (t *Totals) Add(l Lease) {
	t.KVTokens += l.KVTokens
	t.Slots += l.Slots
	t.Leases++
}

// String formats t as "kv=K slots=S leases=N".
func (t Totals) String() string {
	return fmt.Sprintf("kv=%d slots=%d leases=%d", t.KVTokens, t.Slots, t.Leases)
}

// TotalsMismatch is one engine or tenant whose recorded totals differ
// from the sum of its lease rows.
type TotalsMismatch struct {
	Pool PoolID
	// Engine or Tenant names whose totals these are; the other is empty.
	Engine EngineID
	Tenant TenantID
	// Recorded is what the ledger counts (what admission reads); Rows is
	// the sum of the lease rows that name it. An absent record reads zero.
	Recorded Totals
	Rows     Totals
}

// String formats m for logs and anomalies.
func (m TotalsMismatch) String() string {
	who := "engine " + string(m.Engine)
	if m.Engine == "" {
		who = "tenant " + string(m.Tenant)
	}
	return fmt.Sprintf("pool %s %s: recorded %s, lease rows sum to %s", m.Pool, who, m.Recorded, m.Rows)
}

// ErrNoTotalsCheck: the ledger does not implement TotalsChecker.
var ErrNoTotalsCheck = errors.New("ledger: totals check not supported")

// CheckTotals calls l's CheckTotals, or fails with ErrNoTotalsCheck when
// l does not implement TotalsChecker.
func CheckTotals(ctx context.Context, l Ledger, pool PoolID) ([]TotalsMismatch, error) {
	tc, ok := l.(TotalsChecker)
	if !ok {
		return nil, fmt.Errorf("%w by %T", ErrNoTotalsCheck, l)
	}
	return tc.CheckTotals(ctx, pool)
}

// CompareTotals returns the mismatches between recorded engine and tenant
// totals and the sums of rows, sorted by engine then tenant: the
// comparison every backend's CheckTotals makes on what it read. A name in
// only one of the maps compares with zero.
func CompareTotals(pool PoolID, engines map[EngineID]Totals, tenants map[TenantID]Totals, rows []Lease) []TotalsMismatch {
	eRows, tRows := map[EngineID]Totals{}, map[TenantID]Totals{}
	for _, l := range rows {
		e, t := eRows[l.Engine], tRows[l.Tenant]
		e.Add(l)
		t.Add(l)
		eRows[l.Engine], tRows[l.Tenant] = e, t
	}
	var out []TotalsMismatch
	for _, id := range unionKeys(engines, eRows) {
		if engines[id] != eRows[id] {
			out = append(out, TotalsMismatch{Pool: pool, Engine: id, Recorded: engines[id], Rows: eRows[id]})
		}
	}
	for _, id := range unionKeys(tenants, tRows) {
		if tenants[id] != tRows[id] {
			out = append(out, TotalsMismatch{Pool: pool, Tenant: id, Recorded: tenants[id], Rows: tRows[id]})
		}
	}
	return out
}

func unionKeys[K cmp.Ordered, V any](a, b map[K]V) []K {
	keys := make([]K, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// CheckTotals implements TotalsChecker for a Checked ledger whose store
// does: arguments and the closed flag are checked, failures wrapped, as
// for every call. A store without it fails with ErrNoTotalsCheck.
func (c *checked) CheckTotals(ctx context.Context, pool PoolID) ([]TotalsMismatch, error) {
	tc, ok := c.s.(TotalsChecker)
	if !ok {
		return nil, c.fail(ErrNoTotalsCheck, "check totals of pool %s", pool)
	}
	m, err := call(c, ValidatePool(pool), func() ([]TotalsMismatch, error) { return tc.CheckTotals(ctx, pool) })
	if err != nil {
		return nil, c.fail(err, "check totals of pool %s", pool)
	}
	return m, nil
}
