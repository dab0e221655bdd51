package chaos

import (
	"fmt"
	"image/color"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/leasehold/leasehold/internal/ledger"
)

func passWord(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}

// WriteTable prints res as the human summary.
func WriteTable(w io.Writer, res *Result) {
	if res.Compare != nil {
		writeCompare(w, res)
		return
	}
	fmt.Fprintf(w, "\n%s  %s  (ledger %s, %d routers, admission %s, seed %d, %.1fs)  run dir %s\n",
		passWord(res.Pass), res.Scenario, res.Ledger, res.Routers, res.Admin, res.Seed, res.Seconds, res.RunDir)
	if res.Error != "" {
		fmt.Fprintf(w, "error: %s\n", res.Error)
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tRESULT\tFIGURE\tDETAIL")
	for _, c := range res.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Check, passWord(c.Pass), c.Figure, c.Detail)
	}
	tw.Flush()
	r := res.Requests
	fmt.Fprintf(w, "requests: %d sent, %d completed, %d rejected (503/429), %d transport errors, %d cut streams, %d during faults; p50 %.0f ms, p99 %.0f ms\n",
		r.Total, r.Completed, r.Rejected, r.Transport, r.StreamCuts, r.FaultErrors, r.P50MS, r.P99MS)
	if len(r.ByCode) > 0 {
		var codes []string
		for k, v := range r.ByCode {
			codes = append(codes, fmt.Sprintf("%s %d", k, v))
		}
		sort.Strings(codes)
		fmt.Fprintf(w, "rejection codes: %s\n", strings.Join(codes, ", "))
	}
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "ENGINE\tKV CAPACITY\tPEAK ADMITTED\tKV PEAK/CAP\tSLOTS\tPEAK SEQS\tSLOT PEAK/CAP\t")
	for _, e := range res.Engines {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%d\t%d\t%.2f\t\n", e.Engine, e.KVCapacity, e.PeakDemand, e.KVRatio, e.Slots, e.PeakSeqs, e.SlotRatio)
	}
	tw.Flush()
	if res.TTFTEstimate != nil {
		fmt.Fprintf(w, "routers' TTFT estimate error |estimate − observed| / observed: p50 %s\n", res.TTFTEstimate)
	}
	if len(res.Spike) > 0 {
		fmt.Fprintln(w)
		WriteSpike(w, res.Spike)
	}
	if res.Chart != "" {
		fmt.Fprintf(w, "chart: %s\n", res.Chart)
	}
}

func writeCompare(w io.Writer, res *Result) {
	fmt.Fprintf(w, "\n%s  %s  (ledger %s, seed %d, %.1fs)  run dir %s\n", passWord(res.Pass), res.Scenario, res.Ledger, res.Seed, res.Seconds, res.RunDir)
	fmt.Fprintln(w, "peak admitted / capacity on the worst engine, as the engines counted it (KV tokens, sequences);")
	fmt.Fprintln(w, "LOCAL: --admission=local, each router admits from its own snapshot; LEDGER: every request reserved first")
	if res.Reserve != string(ledger.ReserveWorstCase) {
		fmt.Fprintln(w, "elastic pool: LEDGER KV is the KV its requests really held (actual demand; OVER also on any preemption); TOK/S: engines' output tokens per second")
	}
	byN := map[int]map[string]CompareRow{}
	var ns []int
	var adms []string
	for _, r := range res.Compare {
		if byN[r.Routers] == nil {
			byN[r.Routers] = map[string]CompareRow{}
			ns = append(ns, r.Routers)
		}
		byN[r.Routers][r.Admission] = r
		if !contains(adms, r.Admission) {
			adms = append(adms, r.Admission)
		}
	}
	sort.Ints(ns)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	head := "ROUTERS\t"
	for _, a := range adms {
		name := strings.ToUpper(a)
		head += fmt.Sprintf("%s KV\t%s SLOTS\t%s OK/REJ\t%s TOK/S\t", name, name, name, name)
	}
	fmt.Fprintln(tw, head)
	for _, n := range ns {
		line := fmt.Sprintf("%d\t", n)
		for _, a := range adms {
			r, ok := byN[n][a]
			switch {
			case !ok:
				line += "-\t-\t-\t-\t"
			case r.Error != "":
				line += "error\terror\t-\t-\t"
			default:
				mark := ""
				if r.Over {
					mark = " OVER"
				}
				line += fmt.Sprintf("%.2f%s\t%.2f\t%d/%d\t%.0f\t", r.KVRatio, mark, r.SlotRatio, r.Completed, r.Rejected, r.Goodput)
			}
		}
		fmt.Fprintln(tw, line)
	}
	tw.Flush()
	for _, c := range res.Checks {
		fmt.Fprintf(w, "%s %s: %s %s\n", passWord(c.Pass), c.Check, c.Figure, c.Detail)
	}
	if res.Error != "" {
		fmt.Fprintf(w, "error: %s\n", res.Error)
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// chart draws each engine's admitted demand / KV capacity over time, the
// capacity line at 1.0 and a marker per fault step, into a PNG.
func chart(path string, s *Scenario, ev *evidence) error {
	p := plot.New()
	how := s.Topology.Ledger + " ledger"
	if s.Topology.Admission == AdmissionLocal {
		how = "--admission=local"
	}
	p.Title.Text = fmt.Sprintf("%s: admitted KV demand / capacity per engine (%d routers, %s); faults marked",
		s.Name, s.Topology.Routers, how)
	p.X.Label.Text = "seconds since load start"
	p.Y.Label.Text = "admitted / capacity"
	p.Add(plotter.NewGrid())
	byEngine := map[string]plotter.XYs{}
	var names []string
	ymax, xmax := 1.3, s.Workload.Duration.D().Seconds()
	for _, e := range ev.engines {
		if e.Err != "" || e.KVCapacity == 0 {
			continue
		}
		if _, ok := byEngine[e.Engine]; !ok {
			names = append(names, e.Engine)
		}
		y := float64(e.AdmittedDemand) / float64(e.KVCapacity)
		byEngine[e.Engine] = append(byEngine[e.Engine], plotter.XY{X: e.T, Y: y})
		ymax, xmax = max(ymax, y*1.05), max(xmax, e.T)
	}
	sort.Slice(names, func(i, j int) bool { return engineLess(names[i], names[j]) })
	for i, n := range names {
		l, err := plotter.NewLine(byEngine[n])
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.2)
		p.Add(l)
		p.Legend.Add(n, l)
	}
	capLine, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 1}, {X: xmax, Y: 1}})
	if err != nil {
		return err
	}
	capLine.Color = color.RGBA{R: 200, A: 255}
	capLine.Width = vg.Points(2)
	capLine.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
	p.Add(capLine)
	p.Legend.Add("capacity", capLine)
	var labels plotter.XYLabels
	for _, f := range ev.faults {
		m, err := plotter.NewLine(plotter.XYs{{X: f.T, Y: 0}, {X: f.T, Y: ymax}})
		if err != nil {
			return err
		}
		m.Color = color.Gray{Y: 90}
		if f.Phase == "heal" {
			m.Color = color.RGBA{G: 140, A: 255}
			m.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		}
		p.Add(m)
		labels.XYs = append(labels.XYs, plotter.XY{X: f.T, Y: ymax * 0.97})
		labels.Labels = append(labels.Labels, f.Phase+" "+f.Kind+" "+f.Target)
	}
	if len(labels.Labels) > 0 {
		l, err := plotter.NewLabels(labels)
		if err != nil {
			return err
		}
		for i := range l.TextStyle {
			l.TextStyle[i].Rotation = -1.5708
			l.TextStyle[i].XAlign = draw.XLeft
			l.TextStyle[i].Font.Size = vg.Points(7)
		}
		p.Add(l)
	}
	p.Y.Min, p.Y.Max, p.X.Min, p.X.Max = 0, ymax, 0, xmax
	p.Legend.Top = true
	p.Legend.Left = false
	p.Y.Tick.Marker = plot.DefaultTicks{}
	return p.Save(12*vg.Inch, 5*vg.Inch, path)
}
