// Package redteam holds end-to-end reproductions of attacks on a running
// deployment: real reserver, router and enginesim processes on loopback,
// and a throwaway client on the generated protobuf package holding a
// router's own credential, as the red team of issue 15 built it. It has no
// code of its own; its tests show each attack does no harm, judged by the
// engine's own ground truth (enginesim's /admin/stats) and the ledger's
// totals against its lease rows.
package redteam
