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
// scripts/lua/lib.lua, which also lists the fields of State.
type poolKeys struct {
	State     string // HASH  meta, fencing sequence, sweep bound, engines', tenants' and priorities' specs and counters, pool counters
	Engines   string // SET   engine ids with fields in State
	Tenants   string // SET   tenant names with fields in State
	Deadlines string // ZSET  lease id by deadline (ms)
	Holders   string // ZSET  holder id by session expiry (ms)
	Req       string // HASH  "<holder> <request id>" -> lease id
	Leases    string // HASH  lease id -> lease record

	HolderPrefix string // + holder id: SET lease ids
}

// keySchema is the one owner of the Redis key schema: it returns the keys of
// pool under prefix, and the pools index (not hash-tagged: it is touched
// outside scripts). A pool name starting with '}' would give an empty hash
// tag; that only matters on Redis Cluster.
func keySchema(prefix string, pool ledger.PoolID) (poolKeys, string) {
	base := prefix + ":{" + string(pool) + "}:"
	return poolKeys{
		State:        base + "state",
		Engines:      base + "engines",
		Tenants:      base + "tenants",
		Deadlines:    base + "deadlines",
		Holders:      base + "holders",
		Req:          base + "req",
		Leases:       base + "leases",
		HolderPrefix: base + "holder:",
	}, prefix + ":pools"
}

// scriptKeys returns KEYS for every pool script.
func (k poolKeys) scriptKeys() []string {
	return []string{
		k.State, k.Engines, k.Tenants, k.Deadlines, k.Holders, k.Req, k.Leases, k.HolderPrefix,
	}
}

// stateField is the field of State whose presence makes a pool known.
const stateField = "meta"

// checkPrefix rejects a prefix that would break hash tags or key matching.
func checkPrefix(p string) error {
	if strings.ContainsAny(p, "{}*?[]\\ \t\r\n") {
		return fmt.Errorf("%w: prefix %q contains a brace, glob character or space", ledger.ErrInvalidArgument, p)
	}
	return nil
}
