package reserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/reserver"
)

// layoutFleet has an engine in each state the engines table shows at its
// widest: stale and draining, draining, its breaker open, holding leases.
const layoutFleet = `
pools:
  - name: llama-3-70b
    breaker: {failures: 1, cooldown: 1h}
    engines:
      - {id: gpu-0, url: "http://127.0.0.1:1", kv_tokens: 400000, slots: 256, stale_after: 1ms}
      - {id: gpu-1, url: "http://127.0.0.1:2", kv_tokens: 400000, slots: 256, stale_after: 0s}
      - {id: gpu-2, url: "http://127.0.0.1:3", kv_tokens: 400000, slots: 256, stale_after: 0s}
      - {id: gpu-3, url: "http://127.0.0.1:4", kv_tokens: 400000, slots: 256, stale_after: 0s}
tenants:
  - {name: acme, api_keys: [sk-acme], kv_share: 1}
` + fleetPolicy

// layoutWidth is the browser width the audit page's engines table must
// fit: the 1,400 px, where it used to hide "drift KV" and "state".
const layoutWidth = 1400

// layoutPage serves layoutFleet's audit page and returns its HTML.
func layoutPage(t *testing.T) string {
	t.Helper()
	r := start(t, writeFile(t, t.TempDir(), "fleet.yaml", layoutFleet), func(c *reserver.Config) { c.Token = sharedToken })
	c := dial(t, r, sharedToken)
	ctx := context.Background()
	const pool ledger.PoolID = "llama-3-70b"
	if _, err := c.KeepAlive(ctx, pool, "router-a", time.Minute); err != nil {
		t.Fatal(err)
	}
	take := func(engine ledger.EngineID, id string, kv int64) ledger.Lease {
		g, err := c.Acquire(ctx, ledger.AcquireRequest{Pool: pool, Candidates: []ledger.EngineID{engine}, Tenant: "acme", Priority: "standard",
			KVTokens: kv, Slots: 1, Holder: "router-a", RequestID: ledger.RequestID(id), TTL: time.Minute})
		if err != nil {
			t.Fatalf("Acquire on %s: %v", engine, err)
		}
		return g.Lease
	}
	if _, err := c.Release(ctx, take("gpu-2", "fails", 10).Ref(), ledger.Usage{Outcome: ledger.OutcomeConnect}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		take("gpu-3", fmt.Sprint("hold-", i), 100_000)
	}
	for _, e := range []ledger.EngineID{"gpu-0", "gpu-1"} {
		if err := c.SetDraining(ctx, pool, e, true); err != nil {
			t.Fatal(err)
		}
	}
	code, body := get(t, r, "/", "Bearer "+sharedToken)
	if code != 200 {
		t.Fatalf("GET / = %d %s", code, body)
	}
	s := string(body)
	for _, want := range []string{"stale (hold)", `<td class="bad">open `, `<tr class="draining">`, `gpu-1 <span class="drain">draining</span>`} {
		if !strings.Contains(s, want) {
			t.Fatalf("page lacks %q: the test's engines are not in the states it lays out:\n%s", want, s)
		}
	}
	return s
}

var (
	tagRe     = regexp.MustCompile(`<[^>]*>`)
	barCSSRe  = regexp.MustCompile(`\.bar \{[^}]*width: (\d+)px`)
	rowRe     = regexp.MustCompile(`(?s)<tr[^>]*>(.*?)</tr>`)
	cellRe    = regexp.MustCompile(`(?s)<t([hd])[^>]*>(.*?)</t[hd]>`)
	marginCSS = 2 * 21.0 // body margin 1.5em of 14px, both sides
)

// fixedWidth estimates the engines table's width in a fixed-width model
// wider than the page's proportional font: every character 9 px (14 px
// DejaVu Sans, the widest common fallback, averages under 9), every cell
// 16 px of padding, a bar its CSS width; a header wraps at spaces, so
// counts its longest word; a column is as wide as its widest cell.
func fixedWidth(t *testing.T, page string) (total float64, cols []float64) {
	t.Helper()
	const charPx, padPx = 9.0, 16.0
	m := barCSSRe.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no .bar width in the page's CSS")
	}
	bar, _ := strconv.ParseFloat(m[1], 64)
	_, table, _ := strings.Cut(page, "<h2>Engines</h2>")
	table, _, _ = strings.Cut(table, "</table>")
	for _, row := range rowRe.FindAllStringSubmatch(table, -1) {
		for i, cell := range cellRe.FindAllStringSubmatch(row[1], -1) {
			text := strings.TrimSpace(html.UnescapeString(tagRe.ReplaceAllString(cell[2], "")))
			w := float64(len([]rune(text))) * charPx
			if cell[1] == "h" {
				w = 0
				for _, word := range strings.Fields(text) {
					w = max(w, float64(len([]rune(word)))*charPx)
				}
			}
			if strings.Contains(cell[2], `class="bar"`) {
				w = max(w, bar)
			}
			for len(cols) <= i {
				cols = append(cols, 0)
			}
			cols[i] = max(cols[i], w+padPx)
		}
	}
	for _, c := range cols {
		total += c
	}
	return total + marginCSS, cols
}

// TestAuditPageFitsFixedWidth: in the fixed-width model, the engines table
// at its widest fits 1,400 px, so "drift KV" and "state" are never behind
// a scrollbar; and a draining engine says so beside its id, not only in
// "state".
func TestAuditPageFitsFixedWidth(t *testing.T) {
	page := layoutPage(t)
	if w, cols := fixedWidth(t, page); w > layoutWidth || len(cols) != 9 {
		t.Errorf("engines table: %.0f px wide in the fixed-width model (columns %v), want 9 columns within %d px", w, cols, layoutWidth)
	}
}

// TestAuditPageLayoutInChromium renders the page in headless Chromium at
// 1,400 px and reads the layout: the page does not scroll sideways and
// every header of the engines table ("drift KV" and "state" included) is
// inside the window. Skipped where no chromium is installed; the
// fixed-width check above runs everywhere.
func TestAuditPageLayoutInChromium(t *testing.T) {
	var bin string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless_shell"} {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		t.Skip("no chromium on PATH (apt-get install chromium); TestAuditPageFitsFixedWidth checks the layout without it")
	}
	page := layoutPage(t)
	page = strings.Replace(page, `<meta http-equiv="refresh"`, `<meta name="no-refresh"`, 1)
	const probe = `<script>
var d = document.documentElement, r = {scrollWidth: d.scrollWidth, clientWidth: d.clientWidth, headers: {}, engineCells: []};
var t = document.querySelector("h2 + p + table");
t.querySelectorAll("th").forEach(function (th) { r.headers[th.textContent] = th.getBoundingClientRect().right; });
t.querySelectorAll("tr.draining td:nth-child(2)").forEach(function (td) { r.engineCells.push(td.textContent); });
document.body.insertAdjacentHTML("beforeend", "<pre id=layout>" + JSON.stringify(r) + "</pre>");
</script>`
	path := filepath.Join(t.TempDir(), "audit.html")
	if err := os.WriteFile(path, []byte(strings.Replace(page, "</body>", probe+"</body>", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--user-data-dir="+t.TempDir(),
		fmt.Sprintf("--window-size=%d,1000", layoutWidth), "--dump-dom", "file://"+path)
	out, err := cmd.Output()
	_, js, ok := strings.Cut(string(out), "<pre id=\"layout\">")
	js, _, _ = strings.Cut(js, "</pre>")
	var got struct {
		ScrollWidth, ClientWidth float64
		Headers                  map[string]float64
		EngineCells              []string
	}
	if !ok || json.Unmarshal([]byte(html.UnescapeString(js)), &got) != nil {
		t.Fatalf("chromium --dump-dom: %v; no layout in its output:\n%s", err, out)
	}
	t.Logf("at %d px: scroll width %.0f, client width %.0f, headers' right edges %v", layoutWidth, got.ScrollWidth, got.ClientWidth, got.Headers)
	if got.ScrollWidth > got.ClientWidth {
		t.Errorf("the page scrolls sideways at %d px: scroll width %.0f > %.0f", layoutWidth, got.ScrollWidth, got.ClientWidth)
	}
	for _, h := range []string{"pool", "engine", "state", "drift KV", "breaker"} {
		if right, ok := got.Headers[h]; !ok || right > got.ClientWidth {
			t.Errorf("header %q: right edge %.0f (present %v), want within %.0f", h, right, ok, got.ClientWidth)
		}
	}
	if len(got.EngineCells) != 2 {
		t.Errorf("draining rows' engine cells %q, want gpu-0 and gpu-1 each marked draining", got.EngineCells)
	}
	for _, c := range got.EngineCells {
		if !strings.Contains(c, "draining") {
			t.Errorf("draining engine's cell %q does not say draining", c)
		}
	}
}
