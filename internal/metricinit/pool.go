package metricinit

import (
	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ttft"
	"github.com/leasehold/leasehold/internal/waitq"
)

// PoolLabels are the label values of one pool that a router knows at
// start, each a list for Zero.
type PoolLabels struct {
	Pool    []string // the pool's name
	Engines []string // its engines' ids
	Classes []string // the fleet's priority classes
	// Refusals are the reasons a request can be refused capacity with:
	// every ledger.Reasons, ttft_slo, queue_full and ledger_unavailable.
	Refusals []string
}

// ForPool returns p's label values, with the fleet's classes prios.
func ForPool(p fleet.Pool, prios []ledger.PrioritySpec) PoolLabels {
	l := PoolLabels{Pool: []string{string(p.Name)}, Refusals: []string{string(ttft.ReasonSLO), string(waitq.ReasonQueueFull), "ledger_unavailable"}}
	for _, e := range p.Engines {
		l.Engines = append(l.Engines, string(e.ID))
	}
	for _, c := range prios {
		l.Classes = append(l.Classes, string(c.Name))
	}
	for _, r := range ledger.Reasons {
		l.Refusals = append(l.Refusals, string(r))
	}
	return l
}
