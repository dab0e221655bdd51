package route

// Engine ranking. The candidates of one Acquire are the pool's engines,
// ordered by free capacity as this router sees it: the engine's configured
// capacity less what this router already holds on it (lease.Snapshot), or
// in local admission the scraped usage plus its own additions. The score
// is the smaller of the free KV and free slot fractions. The prompt's
// first AffinityBytes bytes pick a preferred engine by rendezvous hashing
// (highest hash of prefix and engine id), which gets AffinityBonus on top:
// requests sharing a prefix (a system prompt, a conversation) go to the
// same engine while it has room, where its prefix cache may hold them.
// Ties are broken by the rendezvous order, so the choice is stable. The
// ledger decides what actually fits; the order only says where to try
// first.

import (
	"hash/maphash"
	"slices"

	"github.com/leasehold/leasehold/internal/ledger"
)

// engineView is one engine's capacity and what is known to be used.
type engineView struct {
	id        ledger.EngineID
	capKV     int64
	capSlots  int64
	usedKV    int64
	usedSlots int64
}

func (v engineView) score() float64 {
	kv := 1 - float64(v.usedKV)/float64(max(v.capKV, 1))
	sl := 1 - float64(v.usedSlots)/float64(max(v.capSlots, 1))
	return min(kv, sl)
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

// rank orders views for a request with prompt prefix; bonus is added to
// the preferred engine's score (no preference when prefix is empty).
func rank(views []engineView, prefix []byte, bonus float64) []ledger.EngineID {
	type scored struct {
		id    ledger.EngineID
		score float64
		rv    uint64
	}
	s := make([]scored, len(views))
	best := -1
	for i, v := range views {
		s[i] = scored{id: v.id, score: v.score(), rv: rendezvous(prefix, v.id)}
		if best < 0 || s[i].rv > s[best].rv {
			best = i
		}
	}
	if len(prefix) > 0 && best >= 0 {
		s[best].score += bonus
	}
	slices.SortStableFunc(s, func(a, b scored) int {
		switch {
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
	return out
}
