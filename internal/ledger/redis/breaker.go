package redis

import (
	"fmt"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// The circuit breaker's fields in a pool's state (see the package doc and
// scripts/lua/lib.lua): the pool's spec as configure.lua stores it, and an
// engine's breaker as stats.lua returns it. The rule itself runs in the
// scripts (acquire.lua, release.lua, drop_lease).

// breakerArg is configure.lua's breaker argument, the pool's breaker
// field: "failures cooldown_ms probes successes", the defaults applied
// (ledger.BreakerSpec.WithDefaults; failures < 0 turns it off). The
// cooldown is rounded up to the millisecond, as every duration sent.
func breakerArg(s ledger.BreakerSpec) string {
	s = s.WithDefaults()
	return fmt.Sprintf("%d %d %d %d", s.Failures, ms(s.Cooldown), s.Probes, s.Successes)
}

// parseBreakerSpec reads the pool's breaker field as breakerArg wrote it;
// empty (a pool configured before breakers) reads the defaults.
func parseBreakerSpec(s string) ledger.BreakerSpec {
	var b ledger.BreakerSpec
	var cooldown int64
	if n, _ := fmt.Sscanf(s, "%d %d %d %d", &b.Failures, &cooldown, &b.Probes, &b.Successes); n != 4 {
		return ledger.BreakerSpec{}.WithDefaults()
	}
	b.Cooldown = time.Duration(cooldown) * time.Millisecond
	return b
}

// parseBreaker reads an engine's e:<id>:b field (lib.lua); empty reads
// closed with every count 0, and the five fields written before failed_ms
// read no failure counted (LastFailureAt zero).
func parseBreaker(s string) ledger.Breaker {
	var b ledger.Breaker
	var state string
	var opened, failed int64
	if n, _ := fmt.Sscanf(s, "%s %d %d %d %d %d", &state, &b.Failures, &b.Successes, &opened, &b.Probes, &failed); n < 5 {
		return ledger.Breaker{}
	}
	if state != "closed" {
		b.State = ledger.BreakerState(state)
	}
	b.OpenedAt, b.LastFailureAt = millisOrZero(opened), millisOrZero(failed)
	return b
}
