package fleet

import "github.com/leasehold/leasehold/internal/ledger"

// NameWholePool renames, in place, the tenant-quota reason of a rejection
// err of tenant whose share of that dimension is the whole pool
// (ledger.WholePoolReason): such a quota binds only when the pool is full,
// and is answered as the engines' capacity reason, not as a rate limit.
// Any other error is left as it is.
func (f *Fleet) NameWholePool(err error, tenant ledger.TenantID) {
	rej := ledger.AsRejection(err)
	if rej == nil || !rej.Reason.Quota() {
		return
	}
	for _, t := range f.Tenants {
		if t.Name == tenant {
			rej.Reason = ledger.WholePoolReason(rej.Reason, t.KVShare, t.SlotShare)
		}
	}
}
