package memory

import (
	"fmt"

	"github.com/leasehold/leasehold/internal/ledger"
)

// Argument checks for the calls internal/ledger/validate.go has no validator
// for (SetDraining, Sweep, Stats, List). They follow its rules for
// identifiers: non-empty, at most ledger.MaxIDLen bytes, no space or control
// character.

func checkID(field, v string) error {
	if v == "" {
		return fmt.Errorf("%w: %s is empty", ledger.ErrInvalidArgument, field)
	}
	if len(v) > ledger.MaxIDLen {
		return fmt.Errorf("%w: %s is %d bytes, more than %d", ledger.ErrInvalidArgument, field, len(v), ledger.MaxIDLen)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x21 || c == 0x7f {
			return fmt.Errorf("%w: %s %q contains a space or control character", ledger.ErrInvalidArgument, field, v)
		}
	}
	return nil
}

func validatePool(pool ledger.PoolID) error { return checkID("pool", string(pool)) }

func validateSetDraining(pool ledger.PoolID, engine ledger.EngineID) error {
	if err := validatePool(pool); err != nil {
		return err
	}
	return checkID("engine", string(engine))
}

func validateSweep(pool ledger.PoolID, max int) error {
	if err := validatePool(pool); err != nil {
		return err
	}
	if max < 0 {
		return fmt.Errorf("%w: sweep max = %d, want >= 0", ledger.ErrInvalidArgument, max)
	}
	return nil
}

func validateFilter(f ledger.Filter) error {
	for _, c := range []struct{ f, v string }{
		{"pool", string(f.Pool)}, {"engine", string(f.Engine)},
		{"holder", string(f.Holder)}, {"tenant", string(f.Tenant)},
	} {
		if c.v == "" {
			continue // zero fields match everything
		}
		if err := checkID("filter "+c.f, c.v); err != nil {
			return err
		}
	}
	if f.Limit < 0 {
		return fmt.Errorf("%w: filter limit = %d, want >= 0", ledger.ErrInvalidArgument, f.Limit)
	}
	return nil
}
