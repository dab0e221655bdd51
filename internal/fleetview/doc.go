// Package fleetview is the router's view of what every router holds: it
// polls the ledger's per-engine reserved totals (Stats) every
// --view-interval, for ranking candidates and for waking queued requests
// when another router released. It only orders candidates and times
// retries; admission stays the ledger's atomic decision (fleetview.go).
package fleetview
