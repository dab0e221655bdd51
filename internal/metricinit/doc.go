// Package metricinit creates, at zero, the series of labelled metric
// families whose label values are known before any event: a pool's
// engines and priority classes from the fleet file, reasons and outcomes
// from fixed sets. A counter or histogram series otherwise appears only at
// its first increment or observation, and until then a dashboard panel
// over it shows "No data" and an alert over it cannot fire or resolve: a
// rate of a series that does not exist is no rate at all, not 0.
//
// It owns only the product of the values and the creation: which families
// and which values are known is the caller's (each binary's metrics). A
// series created here is the one later events increment; creating one
// that exists changes nothing. Label values must stay bounded, as every
// Leasehold label is.
package metricinit
