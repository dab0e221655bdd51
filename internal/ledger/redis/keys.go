package redis

import (
	"fmt"
	"strings"

	"github.com/leasehold/leasehold/internal/ledger"
)

// DefaultPrefix starts every key the ledger writes.
const DefaultPrefix = "lh"

// poolKeys is a pool's key schema. Every key shares the {pool} hash tag so a
// pool lives in one Redis Cluster slot and one script can touch all of it.
// The order of scriptKeys is the KEYS layout documented in
// scripts/lua/lib.lua.
type poolKeys struct {
	Meta       string // HASH  epoch, seq, recovering_until, created, cap_kv, cap_slots, retry_after, priority_order
	Engines    string // SET   engine ids with a hash
	Tenants    string // SET   tenant names with a hash
	Priorities string // HASH  priority name -> max_fill
	Deadlines  string // ZSET  lease id by deadline (ms)
	Holders    string // ZSET  holder id by session expiry (ms)
	Req        string // HASH  "<holder> <request id>" -> lease id
	Counters   string // HASH  counter name -> count

	EnginePrefix string // + engine id: HASH spec, drain flag, reservations, telemetry
	TenantPrefix string // + tenant name: HASH spec and reservations
	LeasePrefix  string // + lease id: HASH lease fields
	HolderPrefix string // + holder id: SET lease ids
}

// keySchema is the one owner of the Redis key schema: it returns the keys of
// pool under prefix, and the pools index (not hash-tagged: it is touched
// outside scripts). A pool name starting with '}' would give an empty hash
// tag; that only matters on Redis Cluster.
func keySchema(prefix string, pool ledger.PoolID) (poolKeys, string) {
	base := prefix + ":{" + string(pool) + "}:"
	return poolKeys{
		Meta:         base + "meta",
		Engines:      base + "engines",
		Tenants:      base + "tenants",
		Priorities:   base + "priorities",
		Deadlines:    base + "deadlines",
		Holders:      base + "holders",
		Req:          base + "req",
		Counters:     base + "counters",
		EnginePrefix: base + "engine:",
		TenantPrefix: base + "tenant:",
		LeasePrefix:  base + "lease:",
		HolderPrefix: base + "holder:",
	}, prefix + ":pools"
}

// scriptKeys returns KEYS for every pool script.
func (k poolKeys) scriptKeys() []string {
	return []string{
		k.Meta, k.Engines, k.Tenants, k.Priorities, k.Deadlines, k.Holders,
		k.Req, k.Counters, k.EnginePrefix, k.TenantPrefix, k.LeasePrefix, k.HolderPrefix,
	}
}

// checkPrefix rejects a prefix that would break hash tags or key matching.
func checkPrefix(p string) error {
	if strings.ContainsAny(p, "{}*?[]\\ \t\r\n") {
		return fmt.Errorf("%w: prefix %q contains a brace, glob character or space", ledger.ErrInvalidArgument, p)
	}
	return nil
}
