package route

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/leasehold/leasehold/internal/baseline"
	"github.com/leasehold/leasehold/internal/fleetapply"
	"github.com/leasehold/leasehold/internal/fleetview"
	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/readiness"
)

// admitter grants capacity for one request: the shared ledger through
// lease.Manager, or the local baseline.
type admitter interface {
	// views returns pool's engines as this router sees them, for ranking.
	views(pool ledger.PoolID) []engineView
	// admit grants on the first fitting candidate, or returns a
	// *ledger.Rejection or another error.
	admit(ctx context.Context, req ledger.AcquireRequest) (lease.Ticket, error)
	// unready says why admit cannot grant now, one cause a line (none:
	// ready): a pool not configured, a session not confirmed, a recovery
	// window; the baseline's first scrape not done.
	unready() []string
	// fenced reports whether pool's session is unconfirmed.
	fenced(pool ledger.PoolID) bool
	// close releases what is held and stops background work.
	close(ctx context.Context) error
}

// capacities returns each pool's engines with their configured capacity.
func capacities(specs []ledger.PoolSpec) map[ledger.PoolID][]engineView {
	out := make(map[ledger.PoolID][]engineView, len(specs))
	for _, s := range specs {
		for _, e := range s.Engines {
			out[s.Name] = append(out[s.Name], engineView{id: e.ID, capKV: e.KVTokens, capSlots: e.Slots})
		}
	}
	return out
}

// ledgerAdmitter leases every request from the shared ledger. Its
// candidates are the engines the applier has configured in the ledger.
type ledgerAdmitter struct {
	m  *lease.Manager
	ap *fleetapply.Applier
	fv *fleetview.View // nil when --view-interval is 0
	// sessions is m once it exists (the applier's Reconfigure hook may
	// run before), the source of each pool's epoch.
	sessions atomic.Pointer[lease.Manager]
	// cands is each applied pool's candidates with their configured
	// capacity; replaced whole (copy on write), read lock-free.
	cands atomic.Pointer[map[ledger.PoolID][]engineView]
}

// candidates returns pool's candidate engines (nil while not applied):
// exactly the engines of the spec last applied. The slice is shared: copy
// before changing it.
func (a *ledgerAdmitter) candidates(pool ledger.PoolID) []engineView {
	if c := a.cands.Load(); c != nil {
		return (*c)[pool]
	}
	return nil
}

// publish installs the candidates of the applied specs (fleetapply
// Config.Publish).
func (a *ledgerAdmitter) publish(specs []ledger.PoolSpec) {
	c := capacities(specs)
	a.cands.Store(&c)
}

// sessionEpoch is pool's epoch as its holder session last saw it, or
// NoEpoch (fleetapply Config.Epoch).
func (a *ledgerAdmitter) sessionEpoch(pool ledger.PoolID) ledger.Epoch {
	m := a.sessions.Load()
	if m == nil {
		return ledger.NoEpoch
	}
	for _, p := range m.Stats().Pools {
		if p.Pool == pool {
			return p.Epoch
		}
	}
	return ledger.NoEpoch
}

func (a *ledgerAdmitter) views(pool ledger.PoolID) []engineView {
	cands := a.candidates(pool)
	if len(cands) == 0 {
		return nil
	}
	var fleet map[ledger.EngineID]lease.Reserved
	if a.fv != nil {
		fleet = a.fv.Engines(pool)
	}
	out := append([]engineView(nil), cands...)
	for i := range out {
		r, f := a.m.HeldOn(pool, out[i].id), fleet[out[i].id]
		out[i].usedKV, out[i].usedSlots = max(r.KVTokens, f.KVTokens), max(r.Slots, f.Slots)
	}
	return out
}

func (a *ledgerAdmitter) admit(ctx context.Context, req ledger.AcquireRequest) (lease.Ticket, error) {
	if len(req.Candidates) == 0 {
		return nil, fmt.Errorf("%w: pool %s", ErrPoolNotConfigured, req.Pool)
	}
	t, err := a.m.Admit(ctx, req)
	if errors.Is(err, ledger.ErrUnknownEngine) || errors.Is(err, ledger.ErrUnknownPool) {
		a.ap.Reapply() // the ledger's configuration changed under the router
	}
	a.ap.Fleet().NameWholePool(err, req.Tenant) // a whole pool's quota binds only when the pool is full
	if err != nil {
		return nil, err
	}
	return t, nil
}

// unready: internal/readiness says why, from the applier and the sessions.
func (a *ledgerAdmitter) unready() []string { return readiness.Why(a.ap, a.m) }

func (a *ledgerAdmitter) fenced(pool ledger.PoolID) bool { return !a.m.Confirmed(pool) }

// close stops the applier first (it may be configuring, and the
// Reconfigure hook waits for it), then releases and ends the sessions.
func (a *ledgerAdmitter) close(ctx context.Context) error {
	if a.fv != nil {
		a.fv.Stop()
	}
	a.ap.Stop()
	return a.m.Close(ctx)
}

// localAdmitter is --admission=local: the baseline (internal/baseline).
type localAdmitter struct{ b *baseline.Admitter }

func (a localAdmitter) views(pool ledger.PoolID) []engineView {
	vs := a.b.Views(pool)
	if vs == nil {
		return nil
	}
	out := make([]engineView, len(vs))
	for i, v := range vs {
		out[i] = engineView{id: v.ID, capKV: v.CapKV, capSlots: v.CapSlots, usedKV: v.UsedKV, usedSlots: v.UsedSlots}
	}
	return out
}

func (a localAdmitter) admit(ctx context.Context, req ledger.AcquireRequest) (lease.Ticket, error) {
	return a.b.Admit(ctx, req)
}

func (a localAdmitter) unready() []string {
	if a.b.Ready() {
		return nil
	}
	return []string{"--admission=local: the first scrape of engine metrics is not done"}
}
func (a localAdmitter) fenced(ledger.PoolID) bool { return false }
func (a localAdmitter) close(context.Context) error {
	a.b.Close()
	return nil
}
