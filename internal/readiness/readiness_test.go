package readiness

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
)

// state is a fixed answer of Pools and Sessions at one probe.
type state struct {
	fleet      *fleet.Fleet
	pending    map[ledger.PoolID]string
	waiting    map[ledger.PoolID][]fleet.WaitingEngine
	confirmed  map[ledger.PoolID]bool
	recovering map[ledger.PoolID]time.Duration
}

func (s state) Fleet() *fleet.Fleet                              { return s.fleet }
func (s state) Pending() map[ledger.PoolID]string                { return s.pending }
func (s state) Waiting() map[ledger.PoolID][]fleet.WaitingEngine { return s.waiting }
func (s state) Confirmed(p ledger.PoolID) bool                   { return s.confirmed[p] }
func (s state) Recovering(p ledger.PoolID) time.Duration         { return s.recovering[p] }

func TestWhy(t *testing.T) {
	fl := &fleet.Fleet{Pools: []fleet.Pool{{Name: "a"}, {Name: "b"}}}
	both := map[ledger.PoolID]bool{"a": true, "b": true}
	waitB := map[ledger.PoolID][]fleet.WaitingEngine{"b": {{ID: "gpu-9", Err: errors.New("gpu-9: no capacity reported yet")}}}
	for _, tc := range []struct {
		name string
		s    state
		want []string
	}{
		{"ready", state{fleet: fl, confirmed: both}, nil},
		{"ready with an engine waiting", state{fleet: fl, confirmed: both, waiting: waitB}, nil},
		{"pending", state{fleet: fl, confirmed: both, pending: map[ledger.PoolID]string{"b": "ledger unavailable"}, waiting: waitB}, []string{
			"pool b not configured in the ledger: ledger unavailable",
			"pool b engine gpu-9 waiting (not a candidate): gpu-9: no capacity reported yet",
		}},
		{"not confirmed", state{fleet: fl, confirmed: map[ledger.PoolID]bool{"b": true}}, []string{
			"pool a holder session not confirmed (starting, or fenced: the ledger did not answer its keepalive in time)",
		}},
		{"recovering, rounded up", state{fleet: fl, confirmed: both, recovering: map[ledger.PoolID]time.Duration{"a": 2*time.Second + 10*time.Millisecond, "b": 40 * time.Millisecond}}, []string{
			"pool a recovering: the ledger refuses every new grant for at most 2.1s more (its recovery_window after a new epoch, while holders re-assert their leases; an engine takes grants again as soon as fresh telemetry shows what it holds)",
			"pool b recovering: the ledger refuses every new grant for at most 100ms more (its recovery_window after a new epoch, while holders re-assert their leases; an engine takes grants again as soon as fresh telemetry shows what it holds)",
		}},
		{"first cause of each pool", state{fleet: fl, pending: map[ledger.PoolID]string{"a": "x"}, recovering: map[ledger.PoolID]time.Duration{"a": time.Second, "b": time.Second}}, []string{
			"pool a not configured in the ledger: x",
			"pool b holder session not confirmed (starting, or fenced: the ledger did not answer its keepalive in time)",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Why(tc.s, tc.s); !slices.Equal(got, tc.want) {
				t.Errorf("Why =\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}
