package lease

import "errors"

// Sentinel errors. Check them with errors.Is; Held.Err returns one of the
// first five once Done is closed.
var (
	// ErrFenced: the holder session in the pool could not be confirmed
	// within SessionTTL-SafetyMargin by the local clock, so the manager
	// stopped using its leases (Done closed) and refuses new acquisitions
	// until a KeepAlive succeeds again.
	ErrFenced = errors.New("lease: fenced: holder session not confirmed")
	// ErrLeaseLost: the ledger no longer has the lease and re-asserting it
	// failed (or its holder session expired), or it could not be renewed
	// before its deadline.
	ErrLeaseLost = errors.New("lease: lease lost")
	// ErrReleased: the lease was released by its user.
	ErrReleased = errors.New("lease: released")
	// ErrClosed: the manager was closed.
	ErrClosed = errors.New("lease: manager closed")
	// ErrUnknownPool: the pool is not one of Config.Pools.
	ErrUnknownPool = errors.New("lease: pool not managed")
	// ErrNotReady: WaitReady gave up before every pool's session was
	// confirmed once.
	ErrNotReady = errors.New("lease: holder sessions not confirmed")
)
