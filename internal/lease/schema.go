package lease

import (
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// row is one held lease in the local table (table.go). Rows are immutable
// once written: a change (renewal, re-assertion, fencing) writes a new row,
// so snapshot readers never see a half-written one.
type row struct {
	Pool   ledger.PoolID
	ID     ledger.LeaseID
	Engine ledger.EngineID

	// Lease is the ledger's latest answer for it (grant, renewal, resize
	// or re-assertion).
	Lease ledger.Lease
	// RenewedAt is the local-clock send time of the call that last set
	// the deadline; TTL is the ttl sent with it. The ledger's deadline is
	// never earlier than RenewedAt+TTL.
	RenewedAt time.Time
	TTL       time.Duration
	// Gen is the holder incarnation of the pool that holds it.
	Gen uint64
	// Fenced is set once Done was closed because the session could not be
	// confirmed; the lease stays listed until its user releases it.
	Fenced bool

	held *Held
}

func (r *row) with(f func(*row)) *row {
	c := *r
	f(&c)
	return &c
}
