package lease

import (
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/holderkey"
	"github.com/leasehold/leasehold/internal/ledger/memory"
)

func TestConfigValidate(t *testing.T) {
	l := memory.New(ledger.Options{}, nil)
	defer l.Close()
	lk := holderkey.New()
	base := func() Config {
		return Config{Ledger: l, Pools: []ledger.PoolID{"p"}, HolderName: "r"}
	}
	cases := []struct {
		name string
		mod  func(*Config)
		want string // substring of the error; "" means valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"no ledger", func(c *Config) { c.Ledger = nil }, "Ledger"},
		{"no pools", func(c *Config) { c.Pools = nil }, "Pools"},
		{"duplicate pool", func(c *Config) { c.Pools = []ledger.PoolID{"p", "p"} }, "Pools[1]"},
		{"empty pool", func(c *Config) { c.Pools = []ledger.PoolID{""} }, "Pools[0]"},
		{"no holder name", func(c *Config) { c.HolderName = "" }, "HolderName"},
		{"long holder name", func(c *Config) { c.HolderName = strings.Repeat("x", 250) }, "HolderName"},
		{"longest holder name", func(c *Config) { c.HolderName = strings.Repeat("x", MaxHolderNameLen) }, ""},
		{"holder name one too long", func(c *Config) { c.HolderName = strings.Repeat("x", MaxHolderNameLen+1) }, "HolderName"},
		{"own holder key, unkeyed ledger", func(c *Config) { c.HolderKey = holderkey.New() }, ""},
		{"the keyed ledger's key", func(c *Config) { c.Ledger = keyedLedger{l, lk}; c.HolderKey = lk }, ""},
		{"not the keyed ledger's key", func(c *Config) { c.Ledger = keyedLedger{l, lk}; c.HolderKey = holderkey.New() }, "HolderKey"},
		{"session ttl too small", func(c *Config) { c.SessionTTL = 100 * time.Millisecond }, "SessionTTL"},
		{"one second session", func(c *Config) { c.SessionTTL = time.Second }, ""},
		{"margin above ttl", func(c *Config) { c.SafetyMargin = 11 * time.Second }, "SafetyMargin"},
		{"keepalive too slow", func(c *Config) { c.KeepAliveInterval = 8 * time.Second }, "KeepAliveInterval"},
		{"lease ttl too small", func(c *Config) { c.LeaseTTL = 500 * time.Millisecond }, "LeaseTTL"},
		{"renew too slow", func(c *Config) { c.RenewInterval = 10 * time.Second }, "RenewInterval"},
		{"negative attempts", func(c *Config) { c.AcquireAttempts = -1 }, "AcquireAttempts"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.mod(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Validate() = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	c := Config{}.withDefaults()
	if c.SessionTTL != 10*time.Second || c.SafetyMargin != 2*time.Second ||
		c.KeepAliveInterval != 10*time.Second/3 || c.LeaseTTL != 30*time.Second || c.RenewInterval != 5*time.Second {
		t.Errorf("defaults = ttl %s margin %s keepalive %s lease %s renew %s",
			c.SessionTTL, c.SafetyMargin, c.KeepAliveInterval, c.LeaseTTL, c.RenewInterval)
	}
	if got := (Config{SessionTTL: time.Second}).withDefaults().SafetyMargin; got != MinSafetyMargin {
		t.Errorf("SafetyMargin for a 1s session = %s, want %s", got, MinSafetyMargin)
	}
}

// keyedLedger is a ledger that presents a holder key, as the grpc://
// backend does.
type keyedLedger struct {
	ledger.Ledger
	key holderkey.Key
}

func (k keyedLedger) HolderKey() holderkey.Key { return k.key }

// TestHolderKeyDefault: a zero HolderKey is the ledger's key when it
// presents one, else a fresh key; holder ids are derived from it.
func TestHolderKeyDefault(t *testing.T) {
	l := memory.New(ledger.Options{}, nil)
	defer l.Close()
	lk := holderkey.New()
	cfg := Config{Ledger: keyedLedger{l, lk}, Pools: []ledger.PoolID{"p"}, HolderName: "r"}
	if got := cfg.withDefaults().HolderKey; got != lk {
		t.Errorf("HolderKey on a keyed ledger is not the ledger's key")
	}
	cfg.Ledger = l
	a, b := cfg.withDefaults().HolderKey, cfg.withDefaults().HolderKey
	if a.IsZero() || a == b {
		t.Errorf("HolderKey on an unkeyed ledger: zero %v, same twice %v; want a fresh key", a.IsZero(), a == b)
	}
	cfg.Ledger = keyedLedger{l, lk}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(t.Context())
	for _, p := range m.Stats().Pools {
		if name, err := holderkey.Verify(p.Holder, lk); err != nil || name != "r" {
			t.Errorf("holder %s: Verify = %q, %v; want it derived from the ledger's key under \"r\"", p.Holder, name, err)
		}
	}
}
