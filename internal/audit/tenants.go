package audit

// The per-tenant section: each tenant of each pool with its quota, what the
// ledger counts it as reserving, and its leases' reservations per priority
// class. Tenant rows follow the pool and tenant of the filter, not its
// engine or holder: a tenant's quota and totals are pool-wide.

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/leasehold/leasehold/internal/ledger"
)

// TenantRow is one tenant in one pool.
type TenantRow struct {
	Pool   ledger.PoolID   `json:"pool"`
	Tenant ledger.TenantID `json:"tenant"`
	// Quota is its KV and slot quota at the pool's capacity now (slots 0:
	// no slot quota).
	Quota Amount `json:"quota"`
	// Reserved and Leases are the ledger's totals for the tenant.
	Reserved Amount `json:"reserved"`
	Leases   int64  `json:"leases"`
	// ByPriority sums its leases per priority class, highest reservation
	// first; from the lease rows read, so partial when the pool's
	// LeasesTruncated is set.
	ByPriority []ClassAmount `json:"by_priority"`
	// Removed: no longer configured, still holding leases.
	Removed bool `json:"removed,omitempty"`
}

// ClassAmount is what one tenant's leases of one class reserve.
type ClassAmount struct {
	Priority ledger.PriorityName `json:"priority"`
	Reserved Amount              `json:"reserved"`
	Leases   int64               `json:"leases"`
}

// tenantRows builds the rows of p's tenants that f selects.
func tenantRows(p PoolInput, f ledger.Filter) []TenantRow {
	byClass := map[ledger.TenantID]map[ledger.PriorityName]*ClassAmount{}
	for _, l := range p.Leases {
		m := byClass[l.Tenant]
		if m == nil {
			m = map[ledger.PriorityName]*ClassAmount{}
			byClass[l.Tenant] = m
		}
		c := m[l.Priority]
		if c == nil {
			c = &ClassAmount{Priority: l.Priority}
			m[l.Priority] = c
		}
		c.Reserved.KVTokens += l.KVTokens
		c.Reserved.Slots += l.Slots
		c.Leases++
	}
	var out []TenantRow
	for _, t := range p.Stats.Tenants {
		if f.Tenant != "" && t.Spec.Name != f.Tenant {
			continue
		}
		row := TenantRow{Pool: p.Stats.Pool, Tenant: t.Spec.Name, Quota: Amount{t.QuotaKV, t.QuotaSlots},
			Reserved: Amount{t.ReservedKV, t.ReservedSlots}, Leases: t.Leases, ByPriority: []ClassAmount{}, Removed: t.Removed}
		for _, c := range byClass[t.Spec.Name] {
			row.ByPriority = append(row.ByPriority, *c)
		}
		slices.SortFunc(row.ByPriority, func(a, b ClassAmount) int {
			return cmp.Or(cmp.Compare(b.Reserved.KVTokens, a.Reserved.KVTokens), cmp.Compare(a.Priority, b.Priority))
		})
		out = append(out, row)
	}
	return out
}

// writeTenants prints the per-tenant section of WriteTable.
func writeTenants(tw *tabwriter.Writer, rows []TenantRow) {
	fmt.Fprintf(tw, "TENANTS (%d)\n", len(rows))
	fmt.Fprintln(tw, "POOL\tTENANT\tLEASES\tKV RESERVED\tKV QUOTA\tSLOTS RESERVED\tSLOT QUOTA\tBY PRIORITY (KV/SLOTS/LEASES)\tFLAGS")
	for _, t := range rows {
		var classes []string
		for _, c := range t.ByPriority {
			classes = append(classes, fmt.Sprintf("%s %d/%d/%d", c.Priority, c.Reserved.KVTokens, c.Reserved.Slots, c.Leases))
		}
		slotQuota, flags := "-", ""
		if t.Quota.Slots > 0 {
			slotQuota = fmt.Sprint(t.Quota.Slots)
		}
		if t.Removed {
			flags = "removed"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\n", t.Pool, t.Tenant, t.Leases, t.Reserved.KVTokens, t.Quota.KVTokens,
			t.Reserved.Slots, slotQuota, orDash(strings.Join(classes, ", ")), orDash(flags))
	}
	fmt.Fprintln(tw)
}
