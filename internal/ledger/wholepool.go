package ledger

// WholePoolReason is the reason a rejection r of a tenant with these
// shares is answered with: a tenant-quota reason where the tenant's share
// of that dimension is the whole pool (kv_share, slot_share 1) is the
// engines' capacity reason instead. Such a quota is the pool's capacity
// itself, so it binds only when the pool is full (Admit checks quotas
// before engines), and a client told it is over its quota (HTTP 429) would
// be told it is rate-limited when the fleet is full. Every other reason is
// returned as it is. Admission is unchanged: this only names the refusal.
func WholePoolReason(r Reason, kvShare, slotShare float64) Reason {
	switch {
	case r == ReasonTenantKV && kvShare >= 1:
		return ReasonEngineKV
	case r == ReasonTenantSlots && slotShare >= 1:
		return ReasonEngineSlots
	}
	return r
}
