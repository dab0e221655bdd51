package redis

import (
	"errors"
	"regexp"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/scripts/lua"
)

func TestDecodeReply(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reply  any
		want   error
		reject *ledger.Rejection
	}{
		{name: "ok", reply: []any{"ok", "17"}},
		{name: "replayed", reply: []any{"replayed", "17"}},
		{name: "unknown pool", reply: []any{"unknown_pool", ""}, want: ledger.ErrUnknownPool},
		{name: "unknown engine", reply: []any{"unknown_engine", "17", "gpu-9"}, want: ledger.ErrUnknownEngine},
		{name: "unknown tenant", reply: []any{"unknown_tenant", "17", "x"}, want: ledger.ErrUnknownTenant},
		{name: "unknown priority", reply: []any{"unknown_priority", "17", "x"}, want: ledger.ErrUnknownPriority},
		{name: "no session", reply: []any{"no_session", "17"}, want: ledger.ErrNoSession},
		{name: "session expired", reply: []any{"session_expired", "17"}, want: ledger.ErrSessionExpired},
		{name: "lease not found", reply: []any{"lease_not_found", "17"}, want: ledger.ErrLeaseNotFound},
		{name: "not holder", reply: []any{"not_holder", "17"}, want: ledger.ErrNotHolder},
		{name: "rejected", reply: []any{"rejected", "17", "engine_kv", "gpu-0", "1500"}, want: ledger.ErrRejected,
			reject: &ledger.Rejection{Reason: ledger.ReasonEngineKV, Engine: "gpu-0", RetryAfter: 1500 * time.Millisecond, Epoch: 17}},
		{name: "rejected pool-wide", reply: []any{"rejected", "17", "too_large", "", int64(0)}, want: ledger.ErrRejected,
			reject: &ledger.Rejection{Reason: ledger.ReasonTooLarge, Epoch: 17}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := decodeReply(tc.reply)
			if tc.want == nil {
				if err != nil || r.epoch != 17 {
					t.Fatalf("decodeReply(%v) = epoch %d, error %v; want epoch 17, nil", tc.reply, r.epoch, err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("decodeReply(%v) error = %v, want errors.Is %v", tc.reply, err, tc.want)
			}
			if tc.reject != nil {
				got := ledger.AsRejection(err)
				if got == nil || *got != *tc.reject {
					t.Errorf("decodeReply(%v) rejection = %+v, want %+v", tc.reply, got, tc.reject)
				}
			}
		})
	}
	for _, bad := range []any{nil, "ok", []any{"ok"}, []any{"what", "1"}, []any{"ok", "x"}, []any{"rejected", "1", "bogus", "", "0"}} {
		if _, err := decodeReply(bad); err == nil {
			t.Errorf("decodeReply(%v) error = nil, want a malformed-reply error", bad)
		}
	}
}

// TestStatusTableCoversScripts checks every status word the library's
// functions reply with is decoded: ok, replayed, rejected or a sentinel in
// statusErrors.
func TestStatusTableCoversScripts(t *testing.T) {
	status := regexp.MustCompile(`return \{'([a-z_]+)'`)
	lib, err := lua.Library()
	if err != nil {
		t.Fatalf("lua.Library: %v", err)
	}
	found := status.FindAllStringSubmatch(lib.Source, -1)
	if len(found) < len(lua.Operations) {
		t.Errorf("the library returns %d status words, fewer than it has functions", len(found))
	}
	for _, m := range found {
		switch w := m[1]; w {
		case statusOK, statusReplayed, statusRejected:
		default:
			if statusErrors[w] == nil {
				t.Errorf("the library returns status %q, which statusErrors does not map", w)
			}
		}
	}
}

// TestDecodeRecord reads a lease from the record grow.lua, resize.lua and
// renew.lua reply with (through decodeLease, which also still reads the
// lease's fields), every flag set and none, and refuses a record it cannot
// read.
func TestDecodeRecord(t *testing.T) {
	full := "1a-5 gpu-0 t batch 100 1 h r1 1700000000123 1700000060123 26 5 1 1 1 1700000000000 1 300"
	want := ledger.Lease{ID: "1a-5", Pool: "p", Engine: "gpu-0", Tenant: "t", Priority: "batch", KVTokens: 100,
		Slots: 1, Holder: "h", RequestID: "r1", Created: time.UnixMilli(1700000000123),
		Deadline: time.UnixMilli(1700000060123), Fence: ledger.Fence{Epoch: 26, Seq: 5}, Reasserted: true,
		Overgrown: true, Unconfirmed: true, Probe: true, Tokens: 300}
	if got, err := decodeLease("p", []any{full}); err != nil || got != want {
		t.Errorf("decodeLease(%q) = %+v, %v; want %+v", full, got, err, want)
	}
	fields := []any{"1a-5", "gpu-0", "t", "batch", "100", "1", "h", "r1", "1700000000123", "1700000060123", "26", "5",
		"1", "1", "1", "1", "300"}
	if got, err := decodeLease("p", fields); err != nil || got != want {
		t.Errorf("decodeLease(the same lease's fields) = %+v, %v; want %+v", got, err, want)
	}
	plain := "1a-5 gpu-0 t batch 100 1 h r1 1700000000123 1700000060123 26 5 0 1 0 0 0"
	want.Reasserted, want.Overgrown, want.Unconfirmed, want.Probe, want.Tokens = false, false, false, false, 0
	if got, err := decodeLease("p", []any{plain}); err != nil || got != want {
		t.Errorf("decodeLease(%q) = %+v, %v; want %+v", plain, got, err, want)
	}
	for _, bad := range []string{
		"1a-5 gpu-0 t batch 100",
		"1a-5 gpu-0 t batch x 1 h r1 1700000000123 1700000060123 26 5 0 1 0 0 0",
		"1a-5 gpu-0 t batch 100 1 h r1 1700000000123 1700000060123 x 5 0 1 0 0 0",
		plain + " many",
	} {
		if _, err := decodeLease("p", []any{bad}); err == nil {
			t.Errorf("decodeLease(%q) error = nil, want a malformed-record error", bad)
		}
	}
}

// TestDecodeGrant reads a new grant from acquire.lua's reply, its lease
// record, with and without the tokens field, and refuses a record it
// cannot read with an error that says what is wrong.
func TestDecodeGrant(t *testing.T) {
	req := ledger.AcquireRequest{Pool: "p", Tenant: "t", Priority: "batch", KVTokens: 100, Slots: 1, Holder: "h",
		RequestID: "r1"}
	base := "1a-5 gpu-0 t batch 100 1 h r1 1700000000123 1700000060123 26 5 0 1 0 0 1"
	for _, tc := range []struct {
		rec    string
		tokens int64
	}{{base, 0}, {base + " 300", 300}} {
		got, err := decodeGrant(req, reply{status: "ok", epoch: 26, rest: []any{tc.rec}})
		want := ledger.Lease{ID: "1a-5", Pool: "p", Engine: "gpu-0", Tenant: "t", Priority: "batch", KVTokens: 100,
			Slots: 1, Holder: "h", RequestID: "r1", Created: time.UnixMilli(1700000000123),
			Deadline: time.UnixMilli(1700000060123), Fence: ledger.Fence{Epoch: 26, Seq: 5}, Probe: true,
			Tokens: tc.tokens}
		if err != nil || got != want {
			t.Errorf("decodeGrant(%q) = %+v, %v; want %+v", tc.rec, got, err, want)
		}
	}
	for _, bad := range []reply{
		{status: "ok", epoch: 26},
		{status: "ok", epoch: 26, rest: []any{"1a-5 gpu-0 t batch"}},
		{status: "ok", epoch: 26, rest: []any{"1a-5 gpu-0 t batch 100 1 h r1 x 1700000060123 26 5 0 1 0 0 1"}},
		{status: "ok", epoch: 26, rest: []any{"1a-5 gpu-0 t batch 100 1 h r1 1700000000123 1700000060123 26 -5 0 1 0 0 1"}},
		{status: "ok", epoch: 26, rest: []any{base + " many"}},
	} {
		if _, err := decodeGrant(req, bad); err == nil {
			t.Errorf("decodeGrant(%v) error = nil, want a malformed-grant error", bad.rest)
		}
	}
}
