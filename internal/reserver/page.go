package reserver

import (
	"bytes"
	_ "embed"
	"html/template"
	"net/http"
	"slices"
	"strings"

	"github.com/leasehold/leasehold/internal/audit"
	"github.com/leasehold/leasehold/internal/ledger"
)

//go:embed page.html
var pageHTML string

var pageTmpl = template.Must(template.New("page").Parse(pageHTML))

type pageEngine struct {
	Row                              audit.EngineRow
	ResKV, ObsKV, ResSlots, ObsSlots float64 // percent of capacity, clamped to [0, 100]
}

type pagePending struct {
	Pool ledger.PoolID
	Why  string
}

// pageWaiting is an engine left out of its configured pool until its
// capacity is known.
type pageWaiting struct {
	Pool   ledger.PoolID
	Engine ledger.EngineID
	Why    string
}

type pageData struct {
	Report  audit.Report
	Engines []pageEngine
	Pending []pagePending
	Waiting []pageWaiting
	Refresh int
}

func pct(v, capacity int64) float64 {
	if capacity <= 0 || v <= 0 {
		return 0
	}
	return min(100, float64(v)*100/float64(capacity))
}

// page renders the human audit page: server-side, no JavaScript, refreshed
// by a meta tag.
func (r *Reserver) page(w http.ResponseWriter, req *http.Request) {
	rep, code, err := r.report(req)
	if err != nil {
		http.Error(w, err.Error(), code)
		return
	}
	d := pageData{Report: rep, Refresh: int(r.cfg.PageRefresh.Seconds())}
	for _, e := range rep.Engines {
		pe := pageEngine{Row: e, ResKV: pct(e.Reserved.KVTokens, e.Capacity.KVTokens), ResSlots: pct(e.Reserved.Slots, e.Capacity.Slots)}
		if e.Observed != nil {
			pe.ObsKV, pe.ObsSlots = pct(e.Observed.KVTokens, e.Capacity.KVTokens), pct(e.Observed.Running, e.Capacity.Slots)
		}
		d.Engines = append(d.Engines, pe)
	}
	for p, why := range r.fleetSt.pendingPools() {
		d.Pending = append(d.Pending, pagePending{p, why})
	}
	slices.SortFunc(d.Pending, func(a, b pagePending) int { return strings.Compare(string(a.Pool), string(b.Pool)) })
	for p, ws := range r.fleetSt.waitingEngines() {
		for _, e := range ws {
			d.Waiting = append(d.Waiting, pageWaiting{p, e.ID, e.Err.Error()})
		}
	}
	slices.SortFunc(d.Waiting, func(a, b pageWaiting) int {
		if c := strings.Compare(string(a.Pool), string(b.Pool)); c != 0 {
			return c
		}
		return strings.Compare(string(a.Engine), string(b.Engine))
	})
	var buf bytes.Buffer
	if err := pageTmpl.Execute(&buf, d); err != nil {
		http.Error(w, "render: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(buf.Bytes())
}
