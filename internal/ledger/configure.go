package ledger

// The configure rule, in one place: what Configure does with each engine and
// tenant row of a pool when it replaces the pool's spec. The memory and etcd
// backends call RowFateOf; configure.lua implements the same rule in Lua,
// and TestConfigureMatchesGo in internal/ledger/redis holds it to this
// function.

// RowFate is what Configure makes of one engine or tenant row.
type RowFate int

const (
	// RowConfigured: the row is in the new spec; its spec is replaced and
	// its state (drain flag, telemetry, reservations, leases) kept.
	RowConfigured RowFate = iota + 1
	// RowRemoved: the row left the spec but still holds leases; it stays,
	// marked removed (no new grants on it), until its last lease ends.
	RowRemoved
	// RowDropped: the row left the spec and holds no lease; it is gone.
	RowDropped
)

// String returns "configured", "removed" or "dropped".
func (f RowFate) String() string {
	switch f {
	case RowConfigured:
		return "configured"
	case RowRemoved:
		return "removed"
	case RowDropped:
		return "dropped"
	}
	return "invalid"
}

// RowFateOf is the configure rule for one engine or tenant row: inSpec says
// whether the new spec names it, leases is how many leases it holds. A row
// in the spec is configured whatever it holds; one out of it is kept,
// removed, exactly while it holds a lease. The same rule ends a removed row
// when its last lease ends: RowFateOf(false, 0) is RowDropped.
func RowFateOf(inSpec bool, leases int64) RowFate {
	switch {
	case inSpec:
		return RowConfigured
	case leases > 0:
		return RowRemoved
	default:
		return RowDropped
	}
}

// ConfigureRows applies RowFateOf to a pool's rows: spec lists the ids the
// new spec names, leases the leases held by each row the pool has now
// (configured or removed). It returns the fate of every id in either.
func ConfigureRows[K comparable](spec []K, leases map[K]int64) map[K]RowFate {
	fates := make(map[K]RowFate, len(spec)+len(leases))
	inSpec := make(map[K]bool, len(spec))
	for _, id := range spec {
		inSpec[id] = true
		fates[id] = RowConfigured
	}
	for id, n := range leases {
		fates[id] = RowFateOf(inSpec[id], n)
	}
	return fates
}
