package etcd

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"

	"github.com/leasehold/leasehold/internal/ledger"
)

// This file owns the key schema; doc.go describes it. No other file builds
// or parses a key.

// Key kinds below a pool's prefix.
const (
	kindSeq        = "seq"
	kindRecovering = "recovering"
	kindEngine     = "engine"
	kindFresh      = "fresh"
	kindTenant     = "tenant"
	kindHolder     = "holder"
	kindLive       = "live"
	kindHolderExp  = "hexp"
	kindLease      = "lease"
	kindRequest    = "req"
	kindDeadline   = "ddl"
	kindByDeadline = "byddl"
	kindHolderIdx  = "hl"
)

// keys builds every key the ledger uses under one prefix.
type keys struct {
	prefix string // ends with "/"
}

// esc makes an id one path segment: '/' and '%' never appear in the result
// except as escapes, so "a" and "a/b" cannot share a key prefix.
func esc(s string) string { return url.PathEscape(s) }

func unesc(s string) (string, error) { return url.PathUnescape(s) }

// stamp formats ledger-clock milliseconds so keys sort by time.
func stamp(ms int64) string {
	if ms < 0 {
		ms = 0
	}
	return fmt.Sprintf("%016d", ms)
}

func (k keys) metaPrefix() string          { return k.prefix + "meta/" }
func (k keys) meta(p ledger.PoolID) string { return k.metaPrefix() + esc(string(p)) }
func (k keys) poolsRoot() string           { return k.prefix + "pool/" }
func (k keys) pool(p ledger.PoolID) string { return k.poolsRoot() + esc(string(p)) + "/" }
func (k keys) kind(p ledger.PoolID, kind string) string {
	return k.pool(p) + kind + "/"
}

func (k keys) seq(p ledger.PoolID) string        { return k.pool(p) + kindSeq }
func (k keys) recovering(p ledger.PoolID) string { return k.pool(p) + kindRecovering }

func (k keys) engine(p ledger.PoolID, e ledger.EngineID) string {
	return k.kind(p, kindEngine) + esc(string(e))
}
func (k keys) fresh(p ledger.PoolID, e ledger.EngineID) string {
	return k.kind(p, kindFresh) + esc(string(e))
}
func (k keys) tenant(p ledger.PoolID, t ledger.TenantID) string {
	return k.kind(p, kindTenant) + esc(string(t))
}
func (k keys) holder(p ledger.PoolID, h ledger.HolderID) string {
	return k.kind(p, kindHolder) + esc(string(h))
}
func (k keys) live(p ledger.PoolID, h ledger.HolderID) string {
	return k.kind(p, kindLive) + esc(string(h))
}
func (k keys) holderExp(p ledger.PoolID, ms int64, h ledger.HolderID) string {
	return k.kind(p, kindHolderExp) + stamp(ms) + "/" + esc(string(h))
}
func (k keys) lease(p ledger.PoolID, id ledger.LeaseID) string {
	return k.kind(p, kindLease) + string(id)
}
func (k keys) request(p ledger.PoolID, h ledger.HolderID, r ledger.RequestID) string {
	return k.kind(p, kindRequest) + esc(string(h)) + "/" + esc(string(r))
}
func (k keys) deadline(p ledger.PoolID, id ledger.LeaseID) string {
	return k.kind(p, kindDeadline) + string(id)
}
func (k keys) byDeadline(p ledger.PoolID, ms int64, id ledger.LeaseID) string {
	return k.kind(p, kindByDeadline) + stamp(ms) + "/" + string(id)
}
func (k keys) holderIdxPrefix(p ledger.PoolID, h ledger.HolderID) string {
	return k.kind(p, kindHolderIdx) + esc(string(h)) + "/"
}
func (k keys) holderIdx(p ledger.PoolID, h ledger.HolderID, id ledger.LeaseID) string {
	return k.holderIdxPrefix(p, h) + string(id)
}

// dueRange returns [from, to) covering the time-ordered index kind
// (kindByDeadline or kindHolderExp) up to and including ms.
func (k keys) dueRange(p ledger.PoolID, kind string, ms int64) (from, to string) {
	return k.kind(p, kind), k.kind(p, kind) + stamp(ms+1)
}

// parsed is a key split into its parts; see parse.
type parsed struct {
	pool ledger.PoolID
	kind string
	rest string // the key's remainder after the kind, unescaped per kind
}

// parsePool returns the pool of a meta key.
func (k keys) parseMeta(key string) (ledger.PoolID, bool) {
	s, ok := strings.CutPrefix(key, k.metaPrefix())
	if !ok {
		return "", false
	}
	p, err := unesc(s)
	return ledger.PoolID(p), err == nil
}

// parse splits a key below poolsRoot into pool, kind and the rest.
func (k keys) parse(key string) (parsed, bool) {
	s, ok := strings.CutPrefix(key, k.poolsRoot())
	if !ok {
		return parsed{}, false
	}
	ep, s, ok := strings.Cut(s, "/")
	if !ok {
		return parsed{}, false
	}
	pool, err := unesc(ep)
	if err != nil {
		return parsed{}, false
	}
	kind, rest, _ := strings.Cut(s, "/")
	return parsed{pool: ledger.PoolID(pool), kind: kind, rest: rest}, true
}

// lastSegment returns the unescaped id after the last '/' of key.
func lastSegment(key string) (string, bool) {
	i := strings.LastIndexByte(key, '/')
	s, err := unesc(key[i+1:])
	return s, err == nil && s != ""
}

// stampOf returns the milliseconds of a time-ordered index key.
func stampOf(key string, kindPrefix string) (int64, bool) {
	s, ok := strings.CutPrefix(key, kindPrefix)
	if !ok || len(s) < 16 {
		return 0, false
	}
	ms, err := strconv.ParseInt(s[:16], 10, 64)
	return ms, err == nil
}

// canonical returns the one spelling of a lease id used in keys, so "0a-1"
// and "a-1" name the same lease.
func canonical(id ledger.LeaseID) (ledger.LeaseID, ledger.Fence, error) {
	f, err := ledger.ParseLeaseID(id)
	if err != nil {
		return ledger.NoLease, ledger.Fence{}, err
	}
	return ledger.MakeLeaseID(f), f, nil
}
