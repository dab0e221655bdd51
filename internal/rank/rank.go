package rank

import (
	"hash/maphash"
	"slices"
	"time"

	"github.com/leasehold/leasehold/internal/enginehealth"
	"github.com/leasehold/leasehold/internal/ledger"
)

// DefaultTTFTWeight is the most free capacity a slower estimated time to
// first token costs an engine.
const DefaultTTFTWeight = 0.5

// ttftFloor is the least best estimate differences are relative to, so
// that engines a few milliseconds apart rank by capacity.
const ttftFloor = 50 * time.Millisecond

// View is one engine as the ranking of one request sees it.
type View struct {
	ID                ledger.EngineID
	CapKV, CapSlots   int64
	UsedKV, UsedSlots int64
	Health            enginehealth.Health
	// TTFT is the engine's estimated time to first token for the request;
	// 0 for all: not known, rank by capacity.
	TTFT time.Duration
}

// Free is the smaller of v's free KV and free slot fractions.
func (v View) Free() float64 {
	kv := 1 - float64(v.UsedKV)/float64(max(v.CapKV, 1))
	sl := 1 - float64(v.UsedSlots)/float64(max(v.CapSlots, 1))
	return min(kv, sl)
}

// tier is v's rank group, lower first; -1 excludes it.
func (v View) tier() int {
	switch {
	case v.Health.Breaker == ledger.BreakerOpen || v.Health.Draining:
		return -1
	case v.Health.Breaker == ledger.BreakerHalfOpen:
		return 0
	case v.Health.Demoted:
		return 2
	}
	return 1
}

// Options are one ranking's settings.
type Options struct {
	// Prefix is the prompt's leading bytes; empty: no affinity.
	Prefix []byte
	// AffinityBonus is added to the preferred engine's score.
	AffinityBonus float64
	// TTFTWeight is the most a slower estimate costs (DefaultTTFTWeight
	// when 0; negative: estimates are ignored).
	TTFTWeight float64
}

var affinitySeed = maphash.MakeSeed()

// rendezvous returns the weight of engine for prefix.
func rendezvous(prefix []byte, engine ledger.EngineID) uint64 {
	var h maphash.Hash
	h.SetSeed(affinitySeed)
	_, _ = h.Write(prefix)
	_ = h.WriteByte(0)
	_, _ = h.WriteString(string(engine))
	return h.Sum64()
}

// Order returns the candidates among views, best first. When every
// engine is excluded it returns none and the reason the ledger would give:
// ledger.ReasonDraining when one is draining, else ReasonBreakerOpen.
func Order(views []View, o Options) ([]ledger.EngineID, ledger.Reason) {
	if o.TTFTWeight == 0 {
		o.TTFTWeight = DefaultTTFTWeight
	}
	type scored struct {
		id    ledger.EngineID
		tier  int
		score float64
		rv    uint64
	}
	s := make([]scored, 0, len(views))
	best, fastest := -1, time.Duration(0)
	reason := ledger.ReasonBreakerOpen
	for _, v := range views {
		t := v.tier()
		if t < 0 {
			if v.Health.Draining {
				reason = ledger.ReasonDraining
			}
			continue
		}
		if v.TTFT > 0 && (fastest == 0 || v.TTFT < fastest) {
			fastest = v.TTFT
		}
		s = append(s, scored{id: v.ID, tier: t, score: v.Free(), rv: rendezvous(o.Prefix, v.ID)})
		if best < 0 || s[len(s)-1].rv > s[best].rv {
			best = len(s) - 1
		}
	}
	if len(s) == 0 {
		if len(views) == 0 {
			return nil, ""
		}
		return nil, reason
	}
	if len(o.Prefix) > 0 {
		s[best].score += o.AffinityBonus
	}
	if fastest > 0 && o.TTFTWeight > 0 {
		ref := max(fastest, ttftFloor).Seconds()
		i := 0
		for _, v := range views {
			if v.tier() < 0 {
				continue
			}
			if v.TTFT > 0 {
				s[i].score -= o.TTFTWeight * min(1, (v.TTFT-fastest).Seconds()/ref)
			}
			i++
		}
	}
	slices.SortStableFunc(s, func(a, b scored) int {
		switch {
		case a.tier != b.tier:
			return a.tier - b.tier
		case a.score > b.score:
			return -1
		case a.score < b.score:
			return 1
		case a.rv > b.rv:
			return -1
		case a.rv < b.rv:
			return 1
		}
		return 0
	})
	out := make([]ledger.EngineID, len(s))
	for i, x := range s {
		out[i] = x.id
	}
	return out, ""
}
