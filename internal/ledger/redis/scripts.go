package redis

// This file turns script replies into ledger values: the scripts in
// scripts/lua reply with an array whose first element is a status word and
// whose second is the pool's epoch; statusErrors maps every non-ok status to
// its ledger sentinel in one table.

import (
	"context"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/scripts/lua"
)

// fn is one operation's function in the ledger's function library.
type fn struct {
	name string
}

// scripts holds the library (scripts/lua) and its function per operation.
type scripts struct {
	lib lua.Lib
	configure, drain, keepalive, acquire, renew, resize, grow, release,
	reassert, observe, sweep, stats, list, totals *fn
}

func loadScripts() (*scripts, error) {
	lib, err := lua.Library()
	if err != nil {
		return nil, err
	}
	s := &scripts{lib: lib}
	for _, x := range []struct {
		op  string
		dst **fn
	}{
		{"configure", &s.configure}, {"drain", &s.drain}, {"keepalive", &s.keepalive},
		{"acquire", &s.acquire}, {"renew", &s.renew}, {"resize", &s.resize}, {"grow", &s.grow},
		{"release", &s.release}, {"reassert", &s.reassert}, {"observe", &s.observe},
		{"sweep", &s.sweep}, {"stats", &s.stats}, {"list", &s.list}, {"totals", &s.totals},
	} {
		name, ok := lib.Functions[x.op]
		if !ok {
			return nil, fmt.Errorf("function library has no function for %s", x.op)
		}
		*x.dst = &fn{name: name}
	}
	return s, nil
}

// functionMissing reports whether err is Redis's reply to an FCALL of a
// function it has not loaded (a new or restarted server, a flushed
// library, a Cluster master added since the load).
func functionMissing(err error) bool {
	return goredis.HasErrorPrefix(err, "Function not found")
}

// loadLibrary loads the library on c, on every master when c is a Cluster
// client: FUNCTION LOAD REPLACE, so routers loading it at once, or again,
// are no harm. Replicas receive it from their master.
func loadLibrary(ctx context.Context, c goredis.UniversalClient, lib lua.Lib) error {
	if cc, ok := c.(*goredis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, m *goredis.Client) error {
			return m.FunctionLoadReplace(ctx, lib.Source).Err()
		})
	}
	return c.FunctionLoadReplace(ctx, lib.Source).Err()
}

// Reply status words.
const (
	statusOK       = "ok"
	statusReplayed = "replayed"
	statusRejected = "rejected"
)

// statusErrors maps each error status a script returns to its sentinel.
var statusErrors = map[string]error{
	"unknown_pool":     ledger.ErrUnknownPool,
	"unknown_engine":   ledger.ErrUnknownEngine,
	"unknown_tenant":   ledger.ErrUnknownTenant,
	"unknown_priority": ledger.ErrUnknownPriority,
	"no_session":       ledger.ErrNoSession,
	"session_expired":  ledger.ErrSessionExpired,
	"lease_not_found":  ledger.ErrLeaseNotFound,
	"not_holder":       ledger.ErrNotHolder,
	"invalid_argument": ledger.ErrInvalidArgument,
	"fence_exhausted":  ledger.ErrFenceExhausted,
}

// reply is a decoded script reply.
type reply struct {
	status string
	epoch  ledger.Epoch
	rest   []any
}

// decodeReply checks a script reply's shape and maps error statuses: it
// returns a *ledger.Rejection for "rejected", a sentinel (with the name the
// script reported, if any) for the statuses in statusErrors, and the reply
// for "ok" and "replayed".
func decodeReply(v any) (reply, error) {
	arr, ok := v.([]any)
	if !ok || len(arr) < 2 {
		return reply{}, fmt.Errorf("malformed script reply %v", v)
	}
	r := reply{status: str(arr[0]), rest: arr[2:]}
	if e := str(arr[1]); e != "" {
		ep, err := strconv.ParseUint(e, 10, 64)
		if err != nil {
			return reply{}, fmt.Errorf("malformed epoch %q in script reply", e)
		}
		r.epoch = ledger.Epoch(ep)
	}
	switch r.status {
	case statusOK, statusReplayed:
		return r, nil
	case statusRejected:
		if len(r.rest) < 3 {
			return reply{}, fmt.Errorf("malformed rejection %v", v)
		}
		reason := ledger.Reason(str(r.rest[0]))
		if !reason.Valid() {
			return reply{}, fmt.Errorf("script returned unknown reason %q", reason)
		}
		return r, &ledger.Rejection{
			Reason:     reason,
			Engine:     ledger.EngineID(str(r.rest[1])),
			RetryAfter: time.Duration(integer(r.rest[2])) * time.Millisecond,
			Epoch:      r.epoch,
		}
	}
	sentinel, ok := statusErrors[r.status]
	if !ok {
		return reply{}, fmt.Errorf("script returned unknown status %q", r.status)
	}
	if len(r.rest) > 0 {
		return r, fmt.Errorf("%w: %s", sentinel, str(r.rest[0]))
	}
	return r, sentinel
}

// str returns a reply element as a string.
func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

// integer returns a reply element (string or integer) as an int64; 0 when it
// is not a number.
func integer(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

// leaseFields is the number of lease fields a reply lists (L_N in
// scripts/lua/lib.lua), in the order decodeLease reads them.
const leaseFields = 17

// decodeLease reads a lease from a reply's lease fields, or from the one
// record string that stands for them (decodeRecord).
func decodeLease(pool ledger.PoolID, f []any) (ledger.Lease, error) {
	if len(f) == 1 {
		return decodeRecord(pool, str(f[0]))
	}
	if len(f) < leaseFields {
		return ledger.Lease{}, fmt.Errorf("malformed lease in script reply: %d fields", len(f))
	}
	ep, err1 := strconv.ParseUint(str(f[10]), 10, 64)
	seq, err2 := strconv.ParseUint(str(f[11]), 10, 64)
	if err1 != nil || err2 != nil {
		return ledger.Lease{}, fmt.Errorf("malformed fence %v.%v in script reply", f[10], f[11])
	}
	return ledger.Lease{
		ID:          ledger.LeaseID(str(f[0])),
		Pool:        pool,
		Engine:      ledger.EngineID(str(f[1])),
		Tenant:      ledger.TenantID(str(f[2])),
		Priority:    ledger.PriorityName(str(f[3])),
		KVTokens:    integer(f[4]),
		Slots:       integer(f[5]),
		Holder:      ledger.HolderID(str(f[6])),
		RequestID:   ledger.RequestID(str(f[7])),
		Created:     time.UnixMilli(integer(f[8])),
		Deadline:    time.UnixMilli(integer(f[9])),
		Fence:       ledger.Fence{Epoch: ledger.Epoch(ep), Seq: seq},
		Reasserted:  str(f[12]) == "1",
		Overgrown:   str(f[13]) == "1",
		Unconfirmed: str(f[14]) == "1",
		Probe:       str(f[15]) == "1",
		Tokens:      integer(f[16]),
	}, nil
}

// hashMap turns an HGETALL reply (flat array, or a map under RESP3) into a map.
func hashMap(v any) map[string]string {
	out := map[string]string{}
	switch x := v.(type) {
	case []any:
		for i := 0; i+1 < len(x); i += 2 {
			out[str(x[i])] = str(x[i+1])
		}
	case map[any]any:
		for k, val := range x {
			out[str(k)] = str(val)
		}
	}
	return out
}

// ms converts a duration to whole milliseconds, rounding up so a deadline is
// never earlier than asked.
func ms(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
