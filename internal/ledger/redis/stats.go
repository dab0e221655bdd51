package redis

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// decodeStats reads stats.lua's reply (see its header for the shape).
func decodeStats(pool ledger.PoolID, r reply) (ledger.PoolStats, error) {
	if len(r.rest) < 14 {
		return ledger.PoolStats{}, fmt.Errorf("malformed stats reply: %d elements", len(r.rest))
	}
	x := r.rest
	now := time.UnixMilli(integer(x[0]))
	st := ledger.PoolStats{
		Pool:            pool,
		Epoch:           r.epoch,
		Now:             now,
		RecoveringUntil: millisOrZero(integer(x[1])),
		CapacityKV:      integer(x[2]),
		CapacitySlots:   integer(x[3]),
		LiveHolders:     int(integer(x[4])),
		Leases:          integer(x[5]),
		Counters:        map[string]int64{},
		Reserve:         ledger.PoolSpec{Reserve: ledger.ReserveMode(str(x[11]))}.Mode(),
		GrowthHeadroom:  float(str(x[12])),
	}
	breaker := parseBreakerSpec(str(x[13]))
	var window time.Duration
	if len(x) > 14 {
		window = time.Duration(integer(x[14])) * time.Millisecond
	}
	engines, _ := x[6].([]any)
	for _, v := range engines {
		pair, _ := v.([]any)
		if len(pair) != 2 {
			return ledger.PoolStats{}, fmt.Errorf("malformed engine in stats reply")
		}
		st.Engines = append(st.Engines, decodeEngine(ledger.EngineID(str(pair[0])), hashMap(pair[1]), pool, now, breaker))
	}
	sort.Slice(st.Engines, func(i, j int) bool { return st.Engines[i].Spec.ID < st.Engines[j].Spec.ID })
	tenants, _ := x[7].([]any)
	for _, v := range tenants {
		pair, _ := v.([]any)
		if len(pair) != 2 {
			return ledger.PoolStats{}, fmt.Errorf("malformed tenant in stats reply")
		}
		h := hashMap(pair[1])
		spec := ledger.TenantSpec{
			Name:              ledger.TenantID(str(pair[0])),
			KVShare:           float(h["kv_share"]),
			SlotShare:         float(h["slot_share"]),
			TokensPerMinute:   integer(h["tpm"]),
			RequestsPerMinute: integer(h["rpm"]),
		}
		rates, err := parseRates(h["rates"])
		if err != nil {
			return ledger.PoolStats{}, fmt.Errorf("tenant %s: %w", spec.Name, err)
		}
		qkv, qslots := ledger.TenantQuota(spec, st.CapacityKV, st.CapacitySlots)
		st.Tenants = append(st.Tenants, ledger.TenantStats{
			Spec:          spec,
			QuotaKV:       qkv,
			QuotaSlots:    qslots,
			ReservedKV:    integer(h["rkv"]),
			ReservedSlots: integer(h["rslots"]),
			Leases:        integer(h["nleases"]),
			Removed:       h["configured"] != "1",
			Rates:         ledger.PruneRates(rates, now, window),
		})
	}
	sort.Slice(st.Tenants, func(i, j int) bool { return st.Tenants[i].Spec.Name < st.Tenants[j].Spec.Name })
	fills := hashMap(x[9])
	for _, name := range strings.Fields(str(x[8])) {
		st.Priorities = append(st.Priorities, ledger.PrioritySpec{Name: ledger.PriorityName(name), MaxFill: float(fills[name])})
	}
	for k, v := range hashMap(x[10]) {
		st.Counters[k] = integer(v)
	}
	return st, nil
}

// decodeEngine reads one engine of stats.lua's reply. The orphan charge
// counts with the correction everywhere, so the correction reported is
// their sum (ledger.Options.OrphanHold). The breaker is read at now with
// the pool's breaker spec (ledger.Breaker.At).
func decodeEngine(id ledger.EngineID, h map[string]string, pool ledger.PoolID, now time.Time, breaker ledger.BreakerSpec) ledger.EngineStats {
	es := ledger.EngineStats{
		Spec: ledger.EngineSpec{
			ID:          id,
			URL:         h["url"],
			KVTokens:    integer(h["kv"]),
			Slots:       integer(h["slots"]),
			StaleAfter:  time.Duration(integer(h["stale_ns"])),
			StalePolicy: ledger.StalePolicy(h["policy"]),
		},
		Draining:        h["draining"] == "1",
		ReservedKV:      integer(h["rkv"]),
		ReservedSlots:   integer(h["rslots"]),
		Leases:          integer(h["nleases"]),
		CorrectionKV:    integer(h["ckv"]) + integer(h["okv"]),
		CorrectionSlots: integer(h["cslots"]) + integer(h["oslots"]),
		ObservedAt:      millisOrZero(integer(h["obs_arrived"])),
		Removed:         h["configured"] != "1",
		OrphanKV:        integer(h["okv"]),
		OrphanSlots:     integer(h["oslots"]),
		OrphanUntil:     millisOrZero(integer(h["orphan_until"])),
		Breaker:         parseBreaker(h["breaker"]).At(now, breaker),
	}
	if _, ok := h["obs_sec"]; ok {
		es.LastObservation = ledger.Observation{
			Pool:          pool,
			Engine:        id,
			KVTokensUsed:  integer(h["obs_used"]),
			KVTokensTotal: integer(h["obs_total"]),
			Running:       integer(h["obs_running"]),
			Waiting:       integer(h["obs_waiting"]),
			ObservedAt:    time.Unix(integer(h["obs_sec"]), integer(h["obs_nsec"])),
		}
	}
	es.Stale = ledger.EngineState{Spec: es.Spec, ObservedAt: es.ObservedAt}.Stale(now)
	return es
}

// parseRates reads a tenant's t:<name>:w (scripts/lua/lib_rate.lua):
// "at tokens requests" triples, oldest first.
func parseRates(s string) ([]ledger.RateBucket, error) {
	f := strings.Fields(s)
	if len(f)%3 != 0 {
		return nil, fmt.Errorf("malformed rate window %q", s)
	}
	var out []ledger.RateBucket
	for i := 0; i < len(f); i += 3 {
		at, err1 := strconv.ParseInt(f[i], 10, 64)
		tok, err2 := strconv.ParseInt(f[i+1], 10, 64)
		req, err3 := strconv.ParseInt(f[i+2], 10, 64)
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, fmt.Errorf("malformed rate window %q", s)
		}
		out = append(out, ledger.RateBucket{At: time.UnixMilli(at), Tokens: tok, Requests: req})
	}
	return out, nil
}

func float(s string) float64 {
	f, _ := strconv.ParseFloat(s, 64)
	return f
}

func strconvU(n uint64) string { return strconv.FormatUint(n, 10) }
