package audit

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
)

// WriteTable prints r for a terminal: the leases, per-engine totals,
// per-tenant totals and the anomalies, each as an aligned table.
func WriteTable(w io.Writer, r Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	at := "(no pool configured)"
	if !r.Now.IsZero() {
		at = "at " + r.Now.UTC().Format(time.RFC3339Nano)
	}
	fmt.Fprintf(tw, "LEASES (%d) %s\n", len(r.Leases), at)
	fmt.Fprintln(tw, "POOL\tLEASE\tHOLDER\tENGINE\tTENANT\tPRIORITY\tKV\tSLOTS\tAGE\tTTL\tFENCE\tFLAGS")
	for _, l := range r.Leases {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n",
			l.Pool, l.ID, l.Holder, l.Engine, l.Tenant, l.Priority, l.KVTokens, l.Slots,
			secs(l.AgeSeconds), secs(l.TTLSeconds), l.Fence, orDash(strings.Join(l.Flags, ",")))
	}
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "ENGINES (%d)\n", len(r.Engines))
	fmt.Fprintln(tw, "POOL\tENGINE\tLEASES\tKV RESERVED\tKV CHARGED\tKV OBSERVED\tKV CAPACITY\tSLOTS RESERVED\tRUNNING\tSLOTS CAPACITY\tDRIFT KV\tOBSERVED AGO\tBREAKER\tFLAGS")
	for _, e := range r.Engines {
		obsKV, running, drift, ago := "-", "-", "-", "-"
		if e.Observed != nil {
			obsKV, running, ago = fmt.Sprint(e.Observed.KVTokens), fmt.Sprint(e.Observed.Running), secs(e.Observed.AgeSeconds)
		}
		if e.Drift != nil {
			drift = fmt.Sprintf("%+d", e.Drift.KVTokens)
		}
		var flags []string
		if e.Stale {
			flags = append(flags, "stale("+string(e.StalePolicy)+")")
		}
		if e.Draining {
			flags = append(flags, "draining")
		}
		if e.Removed {
			flags = append(flags, "removed")
		}
		if e.Orphan != (Amount{}) {
			flags = append(flags, fmt.Sprintf("orphan-held(%d kv,%d slots)", e.Orphan.KVTokens, e.Orphan.Slots))
		}
		// Charged: what the ledger counts against the engine beyond its
		// reservations (the correction, orphan charge included).
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%d\t%d\t%s\t%d\t%s\t%s\t%s\t%s\n",
			e.Pool, e.Engine, e.Leases, e.Reserved.KVTokens, e.Correction.KVTokens, obsKV, e.Capacity.KVTokens,
			e.Reserved.Slots, running, e.Capacity.Slots, drift, ago, breakerCell(e.Breaker, r.Now), orDash(strings.Join(flags, ",")))
	}
	fmt.Fprintln(tw)
	writeTenants(tw, r.Tenants)
	fmt.Fprintf(tw, "ANOMALIES (%d)\n", len(r.Anomalies))
	if len(r.Anomalies) > 0 {
		fmt.Fprintln(tw, "KIND\tPOOL\tENGINE\tLEASE\tHOLDER\tDETAIL")
	}
	for _, a := range r.Anomalies {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", a.Kind, a.Pool, orDash(string(a.Engine)),
			orDash(string(a.Lease)), orDash(string(a.Holder)), a.Detail)
	}
	return tw.Flush()
}

// breakerCell is an engine's breaker in one cell: its state, the failures
// counted while closed, how long ago it opened, the probes out and the
// successful probes while half-open.
func breakerCell(b Breaker, now time.Time) string {
	var detail []string
	switch b.State {
	case string(ledger.BreakerOpen):
		if b.OpenedAt != nil {
			detail = append(detail, "opened "+dur(now.Sub(*b.OpenedAt))+" ago")
		}
	case string(ledger.BreakerHalfOpen):
		detail = append(detail, fmt.Sprintf("%d probes out", b.Probes), fmt.Sprintf("%d ok", b.Successes))
	default:
		if b.Failures > 0 {
			detail = append(detail, fmt.Sprintf("%d failed", b.Failures))
		}
	}
	if len(detail) == 0 {
		return b.State
	}
	return b.State + "(" + strings.Join(detail, ",") + ")"
}

// secs formats a number of seconds as a duration.
func secs(s float64) string {
	return dur(time.Duration(s * float64(time.Second)))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
