// Package tenancy owns what a router gives each tenant: who an API key
// belongs to, the pools and priority classes the tenant may use, the class
// a request runs in, the tenant's weight and bound in the wait queues
// (internal/waitq), the priority engines are told, and the per-tenant
// metrics (metrics.go).
//
// # The class of a request (Table.Class)
//
// A request names a class with X-Priority or the body's "priority", or
// none. None: the tenant's default_priority, else the fleet's
// default_priority when the tenant may use it, else the tenant's first
// listed class. A class the fleet does not list is ErrUnknownPriority (400
// invalid_priority). A class the tenant may not use (tenants[].priorities)
// is, under priority_policy refuse (the default), a *NotAllowedError (403
// priority_not_allowed), before any lease; under clamp, the tenant's best
// class not above the one asked, else its lowest class. Either way a
// tenant never runs in a class it was not given: the class decides
// max_fill (the headroom kept for higher classes) and the queue order.
//
// # Reloads
//
// A Table is one fleet file's and never changes. A router that reloads its
// file (SIGHUP) builds a new one from fleet.(*Fleet).WithTenancy and swaps
// it in; requests that started keep the Table they read.
//
// # What it does not do
//
// It grants nothing and counts no capacity: the ledger checks quotas and
// max_fill, against the class given here.
package tenancy
