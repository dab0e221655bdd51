package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/holderkey"
)

// Defaults for Config.
const (
	DefaultSessionTTL       = 10 * time.Second
	DefaultLeaseTTL         = 30 * time.Second
	DefaultCallTimeout      = 2 * time.Second
	DefaultReleaseTimeout   = 2 * time.Second
	DefaultRenewConcurrency = 8
	DefaultAcquireAttempts  = 3
	// MinSafetyMargin is the smallest default SafetyMargin.
	MinSafetyMargin = 300 * time.Millisecond
	// MinSessionTTL is the smallest SessionTTL Validate accepts.
	MinSessionTTL = 500 * time.Millisecond
	// jitterFraction spreads every interval and TTL by ±10%.
	jitterFraction = 0.1
	// suffixLen is the length of a holder id's suffix (holderkey.Key.Suffix).
	suffixLen = holderkey.SuffixLen
	// MaxHolderNameLen is the longest HolderName: a holder id is the name,
	// '/' and the suffix, within ledger.MaxIDLen.
	MaxHolderNameLen = ledger.MaxIDLen - 1 - suffixLen

	DefaultBlockLowWater     = 0.25
	DefaultBlockMaxPerEngine = 2
	DefaultBlockIdle         = 5 * time.Second
	DefaultBlockBackoff      = time.Second
	// DefaultBlockCarveWithin is BlockConfig.CarveWithin's default: half
	// the ledger's default dispatch grace, leaving the other half for the
	// sub-request to reach its engine.
	DefaultBlockCarveWithin = ledger.DefaultConfirmGrace / 2
)

// BlockConfig configures block leases (see Manager.Admit). Off unless
// KVTokens and Slots are both positive.
type BlockConfig struct {
	// KVTokens and Slots are the size of one block lease. Both 0 (the
	// default) turn blocks off; otherwise both must be positive. A request
	// larger than a block is always acquired on its own.
	KVTokens, Slots int64
	// LowWater is the fraction of one block below which the free part
	// of the blocks of one (pool, engine, tenant, priority) makes the
	// Manager acquire another block in the background. Default 0.25, in
	// (0, 1].
	LowWater float64
	// MaxPerEngine bounds the live blocks per (pool, engine, tenant,
	// priority). Default 2.
	MaxPerEngine int
	// Idle is how long a block with no sub-request is kept before it is
	// released. Default 5s.
	Idle time.Duration
	// Backoff is the pause after a refused block acquisition before the
	// next one for the same engine, tenant and priority (jittered).
	// Default 1s.
	Backoff time.Duration
	// CarveWithin bounds how late after a ledger loss a block carves on
	// capacity granted before it: a block admits a sub-request only while
	// its pool's last successful KeepAlive was sent less than CarveWithin
	// ago and saw the block's epoch, and a block of an epoch the pool has
	// left admits nothing more (it is released when its last sub-request
	// ends). It must stay below the ledger's dispatch grace
	// (ledger.Options.ConfirmGrace) by the dispatch latency, so the
	// observation that ends an engine's recovery shows every sub-request
	// carved before the loss (docs/design.md, "Recovery after ledger
	// loss", A1). With blocks on, the Manager keeps alive every
	// min(KeepAliveInterval, CarveWithin/2). Default 500ms.
	CarveWithin time.Duration
}

// Enabled reports whether blocks are configured.
func (b BlockConfig) Enabled() bool { return b.KVTokens > 0 && b.Slots > 0 }

func (b BlockConfig) withDefaults() BlockConfig {
	b.LowWater = cmp.Or(b.LowWater, DefaultBlockLowWater)
	b.MaxPerEngine = cmp.Or(b.MaxPerEngine, DefaultBlockMaxPerEngine)
	b.Idle = cmp.Or(b.Idle, DefaultBlockIdle)
	b.Backoff = cmp.Or(b.Backoff, DefaultBlockBackoff)
	b.CarveWithin = cmp.Or(b.CarveWithin, DefaultBlockCarveWithin)
	return b
}

func (b BlockConfig) validate() error {
	b = b.withDefaults()
	switch {
	case b.KVTokens == 0 && b.Slots == 0:
		return nil
	case b.KVTokens <= 0 || b.Slots <= 0 || b.KVTokens > ledger.MaxAmount || b.Slots > ledger.MaxAmount:
		return fmt.Errorf("lease: config: Block.KVTokens %d and Block.Slots %d must both be 0 (off) or both in 1..%d",
			b.KVTokens, b.Slots, ledger.MaxAmount)
	case !(b.LowWater > 0 && b.LowWater <= 1):
		return fmt.Errorf("lease: config: Block.LowWater %v must be in (0, 1]", b.LowWater)
	case b.MaxPerEngine < 1:
		return fmt.Errorf("lease: config: Block.MaxPerEngine %d must be >= 1", b.MaxPerEngine)
	case b.Idle <= 0:
		return fmt.Errorf("lease: config: Block.Idle %s must be positive", b.Idle)
	case b.Backoff <= 0:
		return fmt.Errorf("lease: config: Block.Backoff %s must be positive", b.Backoff)
	case b.CarveWithin < 2*time.Millisecond:
		return fmt.Errorf("lease: config: Block.CarveWithin %s must be at least 2ms", b.CarveWithin)
	}
	return nil
}

// ReconfigureFunc re-applies a pool's configuration after the ledger lost
// it (KeepAlive returned ledger.ErrUnknownPool). It must be idempotent.
type ReconfigureFunc func(ctx context.Context, pool ledger.PoolID) error

// Config configures a Manager. Zero fields take the documented defaults;
// Validate reports the first bad field by name.
type Config struct {
	// Ledger is the shared ledger. Required. The Manager does not close it.
	Ledger ledger.Ledger
	// Pools are the pools this router leases in: one holder session and
	// one keepalive loop each. Required, non-empty, no duplicates.
	Pools []ledger.PoolID
	// HolderName is the router's --id. Holder ids are
	// "<HolderName>/<tag>.<nonce>": tag is derived from HolderKey, nonce is
	// random, fresh per Manager and after every expired session. Required,
	// at most MaxHolderNameLen bytes.
	HolderName string
	// HolderKey is the secret the holder ids are derived from
	// (internal/ledger/holderkey). A reserver lets a router credential act
	// only for holder ids derived from the key the call presents, so it
	// must be the key Ledger sends. Zero (the default) means the Ledger's
	// own key when it presents one (holderkey.Keyed: the grpc:// backend),
	// else a fresh one (a store the router reaches directly checks none).
	HolderKey holderkey.Key

	// SessionTTL is the holder session's TTL sent with every KeepAlive.
	// Default 10s, at least 500ms.
	SessionTTL time.Duration
	// KeepAliveInterval is the pause between KeepAlives, jittered ±10%.
	// Default SessionTTL/3; must leave room for at least one retry before
	// the fence: 1.1*KeepAliveInterval < SessionTTL-SafetyMargin. With
	// block leases the Manager keeps alive at least every
	// Block.CarveWithin/2.
	KeepAliveInterval time.Duration
	// SafetyMargin is how long before the ledger could expire the session
	// (by the local clock, counted from the send time of the last
	// successful KeepAlive) the Manager fences itself. Default
	// max(SessionTTL/5, 300ms); must be below SessionTTL.
	SafetyMargin time.Duration

	// LeaseTTL is the deadline of a lease (jittered ±10%) when the
	// AcquireRequest gives none, and of every renewal. Default 30s, at
	// least 1s.
	LeaseTTL time.Duration
	// RenewInterval is how often held leases are scanned; a lease is
	// renewed once half its TTL has passed since its last grant or renewal.
	// Default LeaseTTL/6; must be below LeaseTTL/4.
	RenewInterval time.Duration
	// RenewConcurrency bounds Renew and Reassert calls in flight. Default 8.
	RenewConcurrency int

	// CallTimeout bounds every ledger call the background loops make
	// (KeepAlive, Renew, Reassert, Reconfigure). Default 2s.
	CallTimeout time.Duration
	// ReleaseTimeout bounds Held.Release, which runs under its own context.
	// Default 2s.
	ReleaseTimeout time.Duration
	// AcquireAttempts is how many times Acquire sends the same request
	// (same request id) when the ledger's reply is lost to a transport
	// error. Default 3.
	AcquireAttempts int

	// Block configures block leases. Off by default.
	Block BlockConfig

	// Reconfigure, when set, is called when KeepAlive finds the pool
	// unconfigured (a wiped store); the Manager then keeps alive again and
	// re-asserts its leases. Optional.
	Reconfigure ReconfigureFunc
	// Clock is the local monotonic clock used for fencing, renewal and
	// intervals. Default the real clock.
	Clock clockwork.Clock
	// Logger receives state changes (fenced, recovered, epoch change).
	// Default discards.
	Logger *slog.Logger
}

// keepAliveEvery is the pause between KeepAlives before jitter: the
// configured interval, or with block leases at most half of
// Block.CarveWithin, so blocks keep carving between confirmations.
func (c Config) keepAliveEvery() time.Duration {
	if c.Block.Enabled() {
		return min(c.KeepAliveInterval, c.Block.CarveWithin/2)
	}
	return c.KeepAliveInterval
}

// withDefaults returns c with zero fields set.
func (c Config) withDefaults() Config {
	c.SessionTTL = cmp.Or(c.SessionTTL, DefaultSessionTTL)
	c.SafetyMargin = cmp.Or(c.SafetyMargin, max(c.SessionTTL/5, MinSafetyMargin))
	c.KeepAliveInterval = cmp.Or(c.KeepAliveInterval, c.SessionTTL/3)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, DefaultLeaseTTL)
	c.RenewInterval = cmp.Or(c.RenewInterval, c.LeaseTTL/6)
	c.RenewConcurrency = cmp.Or(c.RenewConcurrency, DefaultRenewConcurrency)
	c.CallTimeout = cmp.Or(c.CallTimeout, DefaultCallTimeout)
	c.ReleaseTimeout = cmp.Or(c.ReleaseTimeout, DefaultReleaseTimeout)
	c.AcquireAttempts = cmp.Or(c.AcquireAttempts, DefaultAcquireAttempts)
	c.Block = c.Block.withDefaults()
	if c.HolderKey.IsZero() {
		if k, ok := c.Ledger.(holderkey.Keyed); ok && !k.HolderKey().IsZero() {
			c.HolderKey = k.HolderKey()
		} else {
			c.HolderKey = holderkey.New()
		}
	}
	if c.Clock == nil {
		c.Clock = clockwork.NewRealClock()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate checks c after applying defaults and names the first bad field.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Ledger == nil:
		return errors.New("lease: config: Ledger is required")
	case len(c.Pools) == 0:
		return errors.New("lease: config: Pools must name at least one pool")
	case c.HolderName == "":
		return errors.New("lease: config: HolderName is required (the router's --id)")
	case len(c.HolderName) > MaxHolderNameLen:
		return fmt.Errorf("lease: config: HolderName is %d bytes, at most %d allowed", len(c.HolderName), MaxHolderNameLen)
	case !ledgerKeyIs(c.Ledger, c.HolderKey):
		return errors.New("lease: config: HolderKey is not the key the Ledger presents to its server; leave it zero to use the Ledger's")
	case c.SessionTTL < MinSessionTTL:
		return fmt.Errorf("lease: config: SessionTTL %s is below the minimum %s", c.SessionTTL, MinSessionTTL)
	case c.SafetyMargin <= 0 || c.SafetyMargin >= c.SessionTTL:
		return fmt.Errorf("lease: config: SafetyMargin %s must be in (0, SessionTTL %s)", c.SafetyMargin, c.SessionTTL)
	case c.KeepAliveInterval <= 0 ||
		time.Duration(float64(c.KeepAliveInterval)*(1+jitterFraction)) >= c.SessionTTL-c.SafetyMargin:
		return fmt.Errorf("lease: config: KeepAliveInterval %s must be positive and, jittered +10%%, below SessionTTL-SafetyMargin %s",
			c.KeepAliveInterval, c.SessionTTL-c.SafetyMargin)
	case c.LeaseTTL < time.Second:
		return fmt.Errorf("lease: config: LeaseTTL %s is below the minimum 1s", c.LeaseTTL)
	case c.RenewInterval <= 0 || c.RenewInterval >= c.LeaseTTL/4:
		return fmt.Errorf("lease: config: RenewInterval %s must be in (0, LeaseTTL/4 %s)", c.RenewInterval, c.LeaseTTL/4)
	case c.RenewConcurrency < 0:
		return fmt.Errorf("lease: config: RenewConcurrency %d must be >= 1", c.RenewConcurrency)
	case c.CallTimeout < 0:
		return fmt.Errorf("lease: config: CallTimeout %s must be positive", c.CallTimeout)
	case c.ReleaseTimeout < 0:
		return fmt.Errorf("lease: config: ReleaseTimeout %s must be positive", c.ReleaseTimeout)
	case c.AcquireAttempts < 0:
		return fmt.Errorf("lease: config: AcquireAttempts %d must be >= 1", c.AcquireAttempts)
	}
	if err := c.Block.validate(); err != nil {
		return err
	}
	seen := make(map[ledger.PoolID]bool, len(c.Pools))
	for i, p := range c.Pools {
		if p == "" || len(p) > ledger.MaxIDLen {
			return fmt.Errorf("lease: config: Pools[%d] %q must be 1..%d bytes", i, p, ledger.MaxIDLen)
		}
		if seen[p] {
			return fmt.Errorf("lease: config: Pools[%d] %q is listed twice", i, p)
		}
		seen[p] = true
	}
	return nil
}

// ledgerKeyIs reports whether l presents no holder key, or presents k.
func ledgerKeyIs(l ledger.Ledger, k holderkey.Key) bool {
	kl, ok := l.(holderkey.Keyed)
	return !ok || kl.HolderKey().IsZero() || kl.HolderKey() == k
}
