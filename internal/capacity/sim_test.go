package capacity

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/lease"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/memory"
	lhredis "github.com/leasehold/leasehold/internal/ledger/redis"
	"github.com/leasehold/leasehold/internal/testutil/redisserver"
)

// small is a run that fits a unit test: 4 pools of 3 engines of 2 slots
// behind 3 routers, offered far more than they hold so that refusals and
// full engines are the rule.
func small() Config {
	return Config{
		Pools: 4, EnginesPerPool: 3, Routers: 3, EngineSlots: 2,
		Rate: 300, Hold: 80 * time.Millisecond, PromptKV: 200, OutputKV: 300,
		Warmup: 300 * time.Millisecond, Window: 1500 * time.Millisecond,
		SessionTTL: 2 * time.Second, ViewInterval: 250 * time.Millisecond,
		ReconcileInterval: 200 * time.Millisecond, SweepInterval: 200 * time.Millisecond, ReapplyInterval: time.Second,
		Seed: 1,
	}
}

// TestRunHoldsCapacity runs the small deployment on the memory ledger and
// on Redis, with and without block leases: the engines' ground truth is
// never over capacity while they fill up and requests are refused, and
// every kind of call the model counts happened.
func TestRunHoldsCapacity(t *testing.T) {
	srv := redisserver.Start(t)
	mem := memory.New(ledger.Options{RecoveryWindow: -1}, nil)
	defer mem.Close()
	onRedis := func(prefix string) Opener {
		return func() (ledger.Ledger, error) {
			return lhredis.Open(srv.URL(), lhredis.Options{Options: ledger.Options{RecoveryWindow: -1}, Prefix: prefix})
		}
	}
	for _, tc := range []struct {
		name  string
		open  Opener
		block bool
	}{
		// Routers and the reserver share the one in-process memory ledger.
		{"memory", func() (ledger.Ledger, error) { return keepOpen{mem}, nil }, false},
		{"redis", onRedis("sim"), false},
		{"redis, block leases", onRedis("simb"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := small()
			if tc.block {
				// Blocks of 2 slots on engines of 8, most of them full.
				cfg.EngineSlots, cfg.Rate = 8, 600
				cfg.Block = lease.BlockConfig{KVTokens: 2 * (cfg.PromptKV + cfg.OutputKV), Slots: 2}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := Run(ctx, cfg, tc.open, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v", res)
			if res.OverAdmitted != 0 {
				t.Errorf("%d grants took an engine over capacity (peak fill %.2f)", res.OverAdmitted, res.PeakFill)
			}
			if tc.block {
				if res.BlockLocal == 0 || res.Granted == 0 {
					t.Errorf("%d grants, %.2f of them against a block lease: want some", res.Granted, res.BlockLocal)
				}
				return
			}
			if res.Granted == 0 || res.Refused == 0 || res.PeakFill != 1 {
				t.Errorf("granted %d, refused %d, peak fill %.2f: want grants, refusals and full engines (the load is meant to exceed capacity)",
					res.Granted, res.Refused, res.PeakFill)
			}
			if res.Failed != 0 {
				t.Errorf("%d requests failed other than by a refusal", res.Failed)
			}
			for _, op := range []Op{OpKeepAlive, OpStats, OpObserve, OpSweep, OpConfigure} {
				if res.Calls[op] == 0 {
					t.Errorf("no %s call in the window", op)
				}
			}
			if res.Calls[OpAcquire] == 0 || res.Calls[OpRelease] == 0 || res.Calls[OpGrow] == 0 {
				t.Errorf("calls %v: want Acquires, Releases and Grows without block leases", res.Calls)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"no routers", func(c *Config) { c.Routers = 0 }, "routers"},
		{"no slots", func(c *Config) { c.EngineSlots = 0 }, "EngineSlots"},
		{"no rate", func(c *Config) { c.Rate = 0 }, "Rate"},
		{"negative view interval", func(c *Config) { c.ViewInterval = -1 }, "ViewInterval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := small()
			tc.edit(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v, want an error naming %s", err, tc.want)
			}
			open := func() (ledger.Ledger, error) { return memory.New(ledger.Options{}, nil), nil }
			if _, err := Run(context.Background(), c, open, nil); err == nil {
				t.Error("Run accepted it")
			}
		})
	}
}

// keepOpen is a ledger whose Close leaves the ledger it wraps open (the
// test closes the shared one).
type keepOpen struct{ ledger.Ledger }

func (keepOpen) Close() error { return nil }
