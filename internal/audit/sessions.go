package audit

import (
	"maps"
	"sync"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// DefaultMaxSessions bounds the sessions a Sessions remembers.
const DefaultMaxSessions = 100000

// forgetAfter is how long after its expiry a session is forgotten when
// room is needed: long after any sweep has revoked its leases.
const forgetAfter = time.Hour

// Sessions remembers the latest expiry of every holder session the reserver
// served a KeepAlive for, so Build can tell leases whose holder died. It
// sees only sessions kept alive through this reserver: routers that talk to
// Redis or etcd directly are unknown to it. It is safe for concurrent use.
type Sessions struct {
	max int
	// mu guards m.
	mu sync.Mutex
	m  map[SessionKey]time.Time
}

// NewSessions returns an empty Sessions holding at most max entries
// (DefaultMaxSessions when max <= 0).
func NewSessions(max int) *Sessions {
	if max <= 0 {
		max = DefaultMaxSessions
	}
	return &Sessions{max: max, m: map[SessionKey]time.Time{}}
}

// Record notes a KeepAlive result. When full, sessions that expired long
// before this one are forgotten; if none can be, the new session is not
// recorded (its holder is then not judged).
func (s *Sessions) Record(sess ledger.Session) {
	k := SessionKey{Pool: sess.Pool, Holder: sess.Holder}
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev, ok := s.m[k]; ok {
		if sess.Expires.After(prev) {
			s.m[k] = sess.Expires
		}
		return
	}
	if len(s.m) >= s.max {
		cutoff := sess.Expires.Add(-forgetAfter)
		maps.DeleteFunc(s.m, func(_ SessionKey, exp time.Time) bool { return exp.Before(cutoff) })
		if len(s.m) >= s.max {
			return
		}
	}
	s.m[k] = sess.Expires
}

// Snapshot returns a copy of the recorded expiries.
func (s *Sessions) Snapshot() map[SessionKey]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.m)
}
