package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"go.yaml.in/yaml/v3"

	"github.com/leasehold/leasehold/internal/fleet"
)

// --- loading -------------------------------------------------------------

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return b
}

// decodeYAML decodes one YAML document strictly into v.
func decodeYAML(t *testing.T, path string, v any) {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, path)))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
}

// yamlDocs decodes every document of a multi-document YAML file.
func yamlDocs(t *testing.T, path string) []map[string]any {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, path)))
	var docs []map[string]any
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("parse %s (document %d): %v", path, len(docs)+1, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
}

// get walks maps and lists: get(doc, "spec", "template", "spec").
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v any) string { s, _ := v.(string); return s }

// --- compose -------------------------------------------------------------

type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
	Ext      map[string]any            `yaml:",inline"` // x-* extension fields
}

type composeService struct {
	Profiles        []string          `yaml:"profiles"`
	Image           string            `yaml:"image"`
	Build           map[string]string `yaml:"build"`
	Command         []string          `yaml:"command"`
	Environment     map[string]string `yaml:"environment"`
	DependsOn       map[string]any    `yaml:"depends_on"`
	Networks        map[string]any    `yaml:"networks"`
	Ports           []string          `yaml:"ports"`
	Volumes         []string          `yaml:"volumes"`
	Restart         string            `yaml:"restart"`
	ReadOnly        bool              `yaml:"read_only"`
	User            string            `yaml:"user"`
	StopGracePeriod string            `yaml:"stop_grace_period"`
	Healthcheck     *struct {
		Test        []string `yaml:"test"`
		Interval    string   `yaml:"interval"`
		Timeout     string   `yaml:"timeout"`
		Retries     int      `yaml:"retries"`
		StartPeriod string   `yaml:"start_period"`
	} `yaml:"healthcheck"`
}

const composeDir = "compose"

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	var c composeFile
	decodeYAML(t, filepath.Join(composeDir, "compose.yaml"), &c)
	for k := range c.Ext {
		if !strings.HasPrefix(k, "x-") {
			t.Errorf("compose.yaml: unknown top-level key %q", k)
		}
	}
	return c
}

// binaryOf is the Leasehold binary a compose service runs ("" for others).
func (s composeService) binaryOf() string {
	if s.Image != "leasehold:dev" || len(s.Command) == 0 {
		return ""
	}
	return s.Command[0]
}

// flagValue returns the value of --name in args ("--name v" or "--name=v").
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// envFile reads KEY=VALUE lines.
func envFile(t *testing.T, path string) map[string]string {
	t.Helper()
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(readFile(t, path)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: line %q is not KEY=VALUE", path, line)
		}
		out[k] = v
	}
	return out
}

func TestComposeStructure(t *testing.T) {
	c := loadCompose(t)
	want := map[string][]string{ // service -> profiles
		"redis": {"redis"}, "etcd-1": {"etcd"}, "etcd-2": {"etcd"}, "etcd-3": {"etcd"},
		"reserver-1": nil, "reserver-2": nil, "router-1": nil, "router-2": nil, "router-3": nil,
		"engine-0": nil, "engine-1": nil, "engine-2": nil, "engine-3": nil,
		"prometheus": nil, "grafana": nil,
	}
	for name, profiles := range want {
		s, ok := c.Services[name]
		if !ok {
			t.Errorf("service %s missing", name)
			continue
		}
		if !slices.Equal(s.Profiles, profiles) {
			t.Errorf("service %s: profiles %q, want %q", name, s.Profiles, profiles)
		}
	}
	for name, s := range c.Services {
		t.Run(name, func(t *testing.T) {
			if s.Healthcheck == nil || len(s.Healthcheck.Test) < 2 || s.Healthcheck.Test[0] != "CMD" {
				t.Errorf("no exec-form healthcheck (distroless images have no shell)")
			}
			for _, p := range s.Ports {
				if !strings.HasPrefix(p, "127.0.0.1:") {
					t.Errorf("port %q is published beyond loopback", p)
				}
			}
			for _, v := range s.Volumes {
				src, _, _ := strings.Cut(v, ":")
				if strings.HasPrefix(src, ".") {
					if _, err := os.Stat(filepath.Join(composeDir, src)); err != nil {
						t.Errorf("bind mount source %s: %v", src, err)
					}
				} else if _, ok := c.Volumes[src]; !ok {
					t.Errorf("named volume %q is not declared", src)
				}
			}
			for dep := range s.DependsOn {
				if _, ok := c.Services[dep]; !ok {
					t.Errorf("depends_on %q: no such service", dep)
				}
			}
			if bin := s.binaryOf(); bin != "" {
				if s.Build["dockerfile"] != "deploy/compose/Dockerfile" || s.Build["context"] != "../.." {
					t.Errorf("build %v, want context ../.. and deploy/compose/Dockerfile", s.Build)
				}
				if !s.ReadOnly || s.User == "" {
					t.Errorf("want read_only and a non-root user, got read_only=%v user=%q", s.ReadOnly, s.User)
				}
				if s.Healthcheck != nil && s.Healthcheck.Test[1] != "probe" {
					t.Errorf("healthcheck %q: want the probe binary", s.Healthcheck.Test)
				}
			}
		})
	}

	redis := c.Services["redis"]
	if v, _ := flagValue(redis.Command, "appendonly"); v != "yes" {
		t.Errorf("redis command %q: want --appendonly yes", redis.Command)
	}
	for _, n := range []string{"etcd-1", "etcd-2", "etcd-3"} {
		cl, _ := flagValue(c.Services[n].Command, "initial-cluster")
		if strings.Count(cl, "=http://") != 3 {
			t.Errorf("%s: --initial-cluster %q does not name three members", n, cl)
		}
		if name, _ := flagValue(c.Services[n].Command, "name"); name != n {
			t.Errorf("%s: --name %q", n, name)
		}
	}

	formats := map[string]bool{}
	ids := map[string]bool{}
	for name, s := range c.Services {
		switch s.binaryOf() {
		case "enginesim":
			f, _ := flagValue(s.Command, "format")
			formats[f] = true
		case "router":
			id, _ := flagValue(s.Command, "id")
			if ids[id] {
				t.Errorf("%s: router --id %q used twice", name, id)
			}
			ids[id] = true
			if l, _ := flagValue(s.Command, "ledger"); l != "grpc://reserver:7400" {
				t.Errorf("%s: --ledger %q, want grpc://reserver:7400 (the reservers' alias)", name, l)
			}
			if s.Environment["LEASEHOLD_TOKEN"] == "" {
				t.Errorf("%s: LEASEHOLD_TOKEN not set", name)
			}
		case "reserver":
			if s.Environment["LEASEHOLD_TOKEN"] == "" {
				t.Errorf("%s: LEASEHOLD_TOKEN not set: a reserver without a token serves loopback only", name)
			}
			if aliases, _ := get(s.Networks, "default", "aliases").([]any); !slices.Contains(aliases, any("reserver")) {
				t.Errorf("%s: no network alias \"reserver\"", name)
			}
		}
	}
	if len(formats) < 3 {
		t.Errorf("enginesim formats %v, want vllm, sglang and tgi", formats)
	}

	// The env files pick a profile and a ledger URL naming its services.
	for file, wantProfile := range map[string]string{".env": "redis", "etcd.env": "etcd"} {
		env := envFile(t, filepath.Join(composeDir, file))
		if env["COMPOSE_PROFILES"] != wantProfile {
			t.Errorf("%s: COMPOSE_PROFILES %q, want %q", file, env["COMPOSE_PROFILES"], wantProfile)
		}
		u, err := url.Parse(env["LEDGER"])
		if err != nil || u.Scheme != wantProfile {
			t.Errorf("%s: LEDGER %q: want a %s:// URL (%v)", file, env["LEDGER"], wantProfile, err)
			continue
		}
		for _, hp := range strings.Split(u.Host, ",") {
			host, _, _ := strings.Cut(hp, ":")
			if s, ok := c.Services[host]; !ok || !slices.Contains(s.Profiles, wantProfile) {
				t.Errorf("%s: LEDGER host %q is not a service of profile %s", file, host, wantProfile)
			}
		}
	}
}

// TestComposeCommandLines checks every Leasehold command line in
// compose.yaml and the k8s manifests against the flags the real binaries
// accept, and that the contract flags (docs/design.md, "Commands and flags")
// are used.
func TestComposeCommandLines(t *testing.T) {
	bin := buildBinaries(t)
	flags := map[string]map[string]bool{}
	for _, b := range []string{"reserver", "router", "enginesim"} {
		flags[b] = flagsOf(t, filepath.Join(bin, b))
	}
	contract := map[string][]string{
		"reserver":  {"ledger", "config", "grpc-listen", "http-listen"},
		"router":    {"ledger", "config", "listen", "id"},
		"enginesim": {"listen", "kv-tokens", "slots", "format"},
	}
	check := func(where, b string, args []string) {
		t.Helper()
		for _, a := range args {
			if !strings.HasPrefix(a, "-") {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if !flags[b][name] {
				t.Errorf("%s: %s has no flag --%s", where, b, name)
			}
		}
		for _, f := range contract[b] {
			if _, ok := flagValue(args, f); !ok {
				t.Errorf("%s: %s command line lacks the contract flag --%s", where, b, f)
			}
		}
	}
	for name, s := range loadCompose(t).Services {
		if b := s.binaryOf(); b != "" {
			check("compose "+name, b, s.Command[1:])
		}
	}
	for _, d := range k8sDocs(t) {
		if d["kind"] != "Deployment" {
			continue
		}
		for _, c := range get(d, "spec", "template", "spec", "containers").([]any) {
			cmd, _ := get(c, "command", 0).(string)
			var args []string
			for _, a := range get(c, "args").([]any) {
				args = append(args, a.(string))
			}
			check("k8s "+str(get(d, "metadata", "name")), filepath.Base(cmd), args)
		}
	}
}

// TestComposeFleet loads the compose fleet file with internal/fleet and
// checks it against the engines compose starts.
func TestComposeFleet(t *testing.T) {
	f, err := fleet.Load(filepath.Join(composeDir, "fleet.yaml"))
	if err != nil {
		t.Fatalf("fleet.Load: %v", err)
	}
	c := loadCompose(t)
	used := map[string]bool{}
	for _, p := range f.Pools {
		for _, e := range p.Engines {
			u, err := url.Parse(e.URL)
			if err != nil {
				t.Fatalf("engine %s url: %v", e.ID, err)
			}
			svc, ok := c.Services[u.Hostname()]
			if !ok || svc.binaryOf() != "enginesim" {
				t.Errorf("engine %s: %s is not an enginesim service", e.ID, u.Hostname())
				continue
			}
			used[u.Hostname()] = true
			if l, _ := flagValue(svc.Command, "listen"); !strings.HasSuffix(l, ":"+u.Port()) {
				t.Errorf("engine %s: URL port %s, enginesim --listen %s", e.ID, u.Port(), l)
			}
			if fm, _ := flagValue(svc.Command, "format"); fm != string(e.Format) {
				t.Errorf("engine %s: fleet format %q, enginesim --format %q", e.ID, e.Format, fm)
			}
			if m, _ := flagValue(svc.Command, "model"); m != string(p.Name) {
				t.Errorf("engine %s: enginesim --model %q, pool %q", e.ID, m, p.Name)
			}
			var kv, slots int64
			v, _ := flagValue(svc.Command, "kv-tokens")
			fmt.Sscan(v, &kv)
			v, _ = flagValue(svc.Command, "slots")
			fmt.Sscan(v, &slots)
			if e.KVTokens > kv || int64(e.Slots) > slots {
				t.Errorf("engine %s: fleet admits kv_tokens %d, slots %d; the engine has %d, %d", e.ID, e.KVTokens, e.Slots, kv, slots)
			}
		}
	}
	for name, s := range c.Services {
		if s.binaryOf() == "enginesim" && !used[name] {
			t.Errorf("enginesim service %s is in no pool", name)
		}
	}
}

// --- prometheus ----------------------------------------------------------

type promConfig struct {
	Global        map[string]string `yaml:"global"`
	RuleFiles     []string          `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		StaticConfigs []struct {
			Targets []string          `yaml:"targets"`
			Labels  map[string]string `yaml:"labels"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

func TestPrometheusConfig(t *testing.T) {
	var p promConfig
	decodeYAML(t, filepath.Join(composeDir, "prometheus.yml"), &p)
	c := loadCompose(t)
	mounts := strings.Join(c.Services["prometheus"].Volumes, "\n")
	for _, rf := range p.RuleFiles {
		// Relative paths resolve against the config file's directory: in
		// the container, and in this checkout (TestPromtoolCheckConfig).
		if in := path.Join("/etc/prometheus", rf); !strings.Contains(mounts, ":"+in+":") {
			t.Errorf("rule file %s (%s in the container) is not mounted into the prometheus service", rf, in)
		}
	}
	if !strings.Contains(mounts, "../prometheus/alerts.yml:") {
		t.Errorf("deploy/prometheus/alerts.yml is not mounted")
	}
	scraped := map[string]string{} // host -> job
	for _, sc := range p.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, tg := range st.Targets {
				host, port, _ := strings.Cut(tg, ":")
				scraped[host] = sc.JobName
				s, ok := c.Services[host]
				if !ok {
					t.Errorf("job %s: target %s is not a compose service", sc.JobName, tg)
					continue
				}
				listen := ""
				switch s.binaryOf() {
				case "reserver":
					listen, _ = flagValue(s.Command, "http-listen")
				case "router", "enginesim":
					listen, _ = flagValue(s.Command, "listen")
				}
				if listen != "" && !strings.HasSuffix(listen, ":"+port) {
					t.Errorf("job %s: target %s, but the service listens on %s", sc.JobName, tg, listen)
				}
			}
		}
	}
	for name, s := range c.Services {
		if s.binaryOf() != "" && !strings.HasPrefix(scraped[name], "leasehold-") {
			t.Errorf("service %s is not scraped by a leasehold-* job", name)
		}
	}
}

type alertRule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadAlerts(t *testing.T) []alertRule {
	t.Helper()
	var f struct {
		Groups []struct {
			Name  string      `yaml:"name"`
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	decodeYAML(t, filepath.Join("prometheus", "alerts.yml"), &f)
	var rules []alertRule
	for _, g := range f.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: needs a name and rules", g.Name)
		}
		rules = append(rules, g.Rules...)
	}
	return rules
}

// headingAnchors returns the GitHub anchors of a markdown file's headings.
func headingAnchors(t *testing.T, path string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	drop := regexp.MustCompile(`[^a-z0-9 _-]`)
	for _, line := range strings.Split(string(readFile(t, path)), "\n") {
		if h, ok := strings.CutPrefix(line, "#"); ok {
			h = strings.TrimSpace(strings.TrimLeft(h, "#"))
			out[strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(h), ""), " ", "-")] = true
		}
	}
	return out
}

func TestAlertRules(t *testing.T) {
	rules := loadAlerts(t)
	anchors := headingAnchors(t, filepath.Join("..", "docs", "operations.md"))
	seen := map[string]bool{}
	metrics := map[string]bool{}
	for _, r := range rules {
		if r.Alert == "" || r.Expr == "" {
			t.Errorf("rule %+v: alert and expr are required", r)
			continue
		}
		if seen[r.Alert] {
			t.Errorf("alert %s defined twice", r.Alert)
		}
		seen[r.Alert] = true
		if !slices.Contains([]string{"critical", "warning", "info"}, r.Labels["severity"]) {
			t.Errorf("%s: severity %q", r.Alert, r.Labels["severity"])
		}
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("%s: summary and description are required", r.Alert)
		}
		doc, anchor, _ := strings.Cut(r.Annotations["runbook"], "#")
		if doc != "docs/operations.md" || !anchors[anchor] {
			t.Errorf("%s: runbook %q: want docs/operations.md#<a heading of docs/operations.md>", r.Alert, r.Annotations["runbook"])
		}
		refs, _ := promqlRefs(r.Expr)
		for _, ref := range refs {
			metrics[ref.name] = true
		}
	}
	// What the deployment issue asks the rules to cover.
	for _, m := range []string{
		"leasehold_reconcile_engine_stale",                       // stale telemetry
		"leasehold_reconcile_drift_kv_tokens",                    // sustained drift
		"leasehold_ledger_rejections_total",                      // rejection rate
		"leasehold_ledger_up",                                    // ledger errors
		"leasehold_reserver_grpc_request_duration_seconds_count", // gRPC error codes
		"leasehold_ledger_expired_total",                         // leases past deadline
		"leasehold_router_fenced",                                // fenced routers
	} {
		if !metrics[m] {
			t.Errorf("no alert rule uses %s", m)
		}
	}
}

// --- grafana -------------------------------------------------------------

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
			Query      any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Type       string            `json:"type"`
	Title      string            `json:"title"`
	Datasource map[string]string `json:"datasource"`
	Targets    []struct {
		Expr       string            `json:"expr"`
		Datasource map[string]string `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	dec := json.NewDecoder(bytes.NewReader(readFile(t, filepath.Join("grafana", "leasehold.json"))))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("parse grafana/leasehold.json: %v", err)
	}
	return d
}

// dashboardExprs lists every PromQL expression of the dashboard: panel
// targets and template variable queries (label_values(metric, label)).
func dashboardExprs(d dashboard) []string {
	var out []string
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out = append(out, tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	lv := regexp.MustCompile(`label_values\(\s*([^,]+),`)
	for _, v := range d.Templating.List {
		if m := lv.FindStringSubmatch(v.Definition); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Errorf("dashboard needs a uid and a title")
	}
	var ds struct {
		Datasources []struct {
			Name      string         `yaml:"name"`
			UID       string         `yaml:"uid"`
			Type      string         `yaml:"type"`
			Access    string         `yaml:"access"`
			URL       string         `yaml:"url"`
			IsDefault bool           `yaml:"isDefault"`
			JSONData  map[string]any `yaml:"jsonData"`
		} `yaml:"datasources"`
		APIVersion int `yaml:"apiVersion"`
	}
	decodeYAML(t, filepath.Join(composeDir, "grafana", "provisioning", "datasources", "prometheus.yaml"), &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].URL != "http://prometheus:9090" {
		t.Fatalf("datasource provisioning %+v: want the compose prometheus", ds.Datasources)
	}
	uid := ds.Datasources[0].UID
	titles := map[string]bool{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if titles[p.Title] {
				t.Errorf("panel title %q used twice", p.Title)
			}
			titles[p.Title] = true
			if p.Type != "row" {
				if len(p.Targets) == 0 {
					t.Errorf("panel %q has no query", p.Title)
				}
				if p.Datasource["uid"] != uid {
					t.Errorf("panel %q: datasource %v, want uid %q", p.Title, p.Datasource, uid)
				}
				for _, tg := range p.Targets {
					if strings.TrimSpace(tg.Expr) == "" {
						t.Errorf("panel %q: empty expression", p.Title)
					}
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	metrics := map[string]bool{}
	for _, e := range dashboardExprs(d) {
		refs, _ := promqlRefs(e)
		for _, r := range refs {
			metrics[r.name] = true
		}
	}
	for _, m := range []string{
		"leasehold_ledger_reserved_kv_tokens", "leasehold_reconcile_drift_kv_tokens", "leasehold_ledger_capacity_kv_tokens",
		"leasehold_ledger_grants_total", "leasehold_ledger_rejections_total", "leasehold_ledger_live_holders",
		"leasehold_reserver_grpc_request_duration_seconds_bucket", "leasehold_ledger_stats_read_seconds",
		"leasehold_reconcile_stale_engines", "leasehold_router_fenced", "leasehold_router_queue_depth",
	} {
		if !metrics[m] {
			t.Errorf("no dashboard panel queries %s", m)
		}
	}
	// The compose grafana mounts the dashboard where the provider looks.
	var prov struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Name, Folder, Type string
			DisableDeletion    bool `yaml:"disableDeletion"`
			AllowUIUpdates     bool `yaml:"allowUiUpdates"`
			Options            struct{ Path string }
		} `yaml:"providers"`
	}
	decodeYAML(t, filepath.Join(composeDir, "grafana", "provisioning", "dashboards", "leasehold.yaml"), &prov)
	mounts := strings.Join(loadCompose(t).Services["grafana"].Volumes, "\n")
	if len(prov.Providers) != 1 || !strings.Contains(mounts, "../grafana/leasehold.json:"+prov.Providers[0].Options.Path+"/") {
		t.Errorf("grafana: the dashboard is not mounted under the provider path (%+v; mounts %s)", prov.Providers, mounts)
	}
}

// --- kubernetes ----------------------------------------------------------

func k8sDocs(t *testing.T) []map[string]any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("k8s", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no k8s manifests: %v", err)
	}
	var docs []map[string]any
	for _, f := range files {
		for _, d := range yamlDocs(t, f) {
			if d["apiVersion"] == nil || d["kind"] == nil {
				t.Errorf("%s: a document without apiVersion/kind", f)
			}
			d["_file"] = f
			docs = append(docs, d)
		}
	}
	return docs
}

func TestKubernetes(t *testing.T) {
	docs := k8sDocs(t)
	byKind := map[string]map[string]map[string]any{}
	for _, d := range docs {
		k, n := d["kind"].(string), str(get(d, "metadata", "name"))
		if byKind[k] == nil {
			byKind[k] = map[string]map[string]any{}
		}
		byKind[k][n] = d
	}
	// kustomization lists every manifest but the examples (the secret,
	// the engines' KEDA ScaledObject).
	kust := byKind["Kustomization"][""]
	for _, d := range docs {
		f := filepath.Base(d["_file"].(string))
		if f == "kustomization.yaml" || strings.HasSuffix(f, ".example.yaml") {
			continue
		}
		if !strings.Contains(fmt.Sprint(kust["resources"]), f) {
			t.Errorf("kustomization.yaml does not list %s", f)
		}
	}
	secret := byKind["Secret"]["leasehold-tokens"]
	if secret == nil {
		t.Fatalf("no example Secret leasehold-tokens")
	}
	for _, name := range []string{"leasehold-reserver", "leasehold-router"} {
		t.Run(name, func(t *testing.T) {
			dep := byKind["Deployment"][name]
			if dep == nil {
				t.Fatalf("Deployment %s missing", name)
			}
			labels := get(dep, "spec", "selector", "matchLabels").(map[string]any)
			if !mapSubset(labels, get(dep, "spec", "template", "metadata", "labels").(map[string]any)) {
				t.Errorf("selector %v does not match the pod labels", labels)
			}
			pod := get(dep, "spec", "template", "spec")
			c := get(pod, "containers", 0)
			for probe, path := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
				if got := get(c, probe, "httpGet", "path"); got != path {
					t.Errorf("%s path %v, want %s", probe, got, path)
				}
			}
			for _, r := range []string{"requests", "limits"} {
				for _, res := range []string{"cpu", "memory"} {
					if get(c, "resources", r, res) == nil {
						t.Errorf("resources.%s.%s missing", r, res)
					}
				}
			}
			if get(pod, "securityContext", "runAsNonRoot") != true || get(c, "securityContext", "readOnlyRootFilesystem") != true {
				t.Errorf("want runAsNonRoot and readOnlyRootFilesystem")
			}
			token := false
			for _, e := range get(c, "env").([]any) {
				if get(e, "name") == "LEASEHOLD_TOKEN" {
					ref := get(e, "valueFrom", "secretKeyRef")
					token = ref != nil && get(ref, "name") == "leasehold-tokens" && get(secret, "stringData", str(get(ref, "key"))) != nil
				}
				if get(e, "value") != nil && strings.Contains(strings.ToLower(str(get(e, "name"))), "token") {
					t.Errorf("env %v: a token given as a literal value", get(e, "name"))
				}
			}
			if !token {
				t.Errorf("LEASEHOLD_TOKEN is not taken from a key of Secret leasehold-tokens")
			}
			svc := byKind["Service"][name]
			if svc == nil || !mapSubset(get(svc, "spec", "selector").(map[string]any), labels) {
				t.Errorf("Service %s missing or selects other pods", name)
			}
			pdb := byKind["PodDisruptionBudget"][name]
			if pdb == nil || !mapSubset(get(pdb, "spec", "selector", "matchLabels").(map[string]any), labels) {
				t.Errorf("PodDisruptionBudget %s missing or selects other pods", name)
			} else if get(pdb, "spec", "minAvailable") == nil && get(pdb, "spec", "maxUnavailable") == nil {
				t.Errorf("PodDisruptionBudget %s sets neither minAvailable nor maxUnavailable", name)
			}
			grace, _ := get(pod, "terminationGracePeriodSeconds").(int)
			if grace == 0 {
				t.Errorf("terminationGracePeriodSeconds not set")
			}
		})
	}
	hpa := byKind["HorizontalPodAutoscaler"]["leasehold-router"]
	if hpa == nil || get(hpa, "spec", "scaleTargetRef", "name") != "leasehold-router" {
		t.Errorf("HPA for the router missing or aimed elsewhere")
	}
	cm := byKind["ConfigMap"]["leasehold-fleet"]
	if cm == nil {
		t.Fatalf("ConfigMap leasehold-fleet missing")
	}
	if _, err := fleet.Parse([]byte(str(get(cm, "data", "fleet.yaml")))); err != nil {
		t.Errorf("ConfigMap fleet.yaml: %v", err)
	}
}

func mapSubset(sub, of map[string]any) bool {
	for k, v := range sub {
		if of[k] != v {
			return false
		}
	}
	return len(sub) > 0
}

// --- metrics: every name queried is exported -----------------------------

// syntheticMetrics are made by Prometheus, not by a target.
var syntheticMetrics = map[string]bool{"up": true}

// targetLabels are attached by Prometheus to every scraped series.
var targetLabels = map[string]bool{"job": true, "instance": true, "format": true, "le": true}

// TestQueriedMetricsAreExported starts a real enginesim pair, reserver and
// router on loopback, scrapes them, and checks that every metric name (and
// every selector and grouping label) in the dashboard and the alert rules
// is one they export. Histograms may be referenced as _bucket, _sum or
// _count.
func TestQueriedMetricsAreExported(t *testing.T) {
	st := startStack(t)
	t.Run("when idle", func(t *testing.T) { checkQueriedMetrics(t, st.idle, false) })
	checkQueriedMetrics(t, st.exported, true)
}

// checkQueriedMetrics checks every metric the dashboard, the alerts and
// the recording rules query against exported; with labels, their labels
// too. Idle (before any request or failure), every family must already be
// there: one that appears only after its first event leaves panels and
// alerts on "No data".
func checkQueriedMetrics(t *testing.T, exported map[string]family, labels bool) {
	lookup := func(name string) (family, bool) {
		if f, ok := exported[name]; ok {
			return f, true
		}
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suf); ok {
				if f, ok := exported[base]; ok && f.typ == dto.MetricType_HISTOGRAM {
					return f, true
				}
			}
		}
		return family{}, false
	}
	type source struct{ where, expr string }
	var sources []source
	for _, e := range dashboardExprs(loadDashboard(t)) {
		sources = append(sources, source{"dashboard", e})
	}
	for _, r := range loadAlerts(t) {
		sources = append(sources, source{"alert " + r.Alert, r.Expr})
	}
	for _, r := range loadRecordingRules(t) {
		sources = append(sources, source{"recording rule " + r.Record, r.Expr})
	}
	checked := 0
	for _, s := range sources {
		refs, grouping := promqlRefs(s.expr)
		if len(refs) == 0 {
			t.Errorf("%s: no metric found in %q", s.where, s.expr)
		}
		seen := map[string]bool{}
		for _, ref := range refs {
			if syntheticMetrics[ref.name] {
				continue
			}
			checked++
			f, ok := lookup(ref.name)
			if !ok {
				t.Errorf("%s: %s is not exported by reserver, router or enginesim\n  in %s", s.where, ref.name, s.expr)
				continue
			}
			for l := range f.labels {
				seen[l] = true
			}
			// Idle: a counter's or a histogram's known series are there
			// before its first event (a gauge read from state, e.g. an
			// engine's drift, appears with that state).
			if !labels && (f.typ == dto.MetricType_COUNTER || f.typ == dto.MetricType_HISTOGRAM) {
				for _, kv := range []string{"pool=p", "engine=e-vllm", "engine=e-sglang"} {
					if name, _, _ := strings.Cut(kv, "="); f.labels[name] && !f.values[kv] {
						t.Errorf("%s: %s has no series with %s before the first event", s.where, ref.name, kv)
					}
				}
			}
			for _, l := range ref.labels {
				if labels && !f.labels[l] && !targetLabels[l] {
					t.Errorf("%s: %s has no label %q (it has %v)", s.where, ref.name, l, slices.Sorted(maps.Keys(f.labels)))
				}
			}
		}
		for _, l := range grouping {
			if labels && !seen[l] && !targetLabels[l] {
				t.Errorf("%s: grouping label %q is on none of the metrics of %q", s.where, l, s.expr)
			}
		}
	}
	t.Logf("%d metric references checked against %d exported families", checked, len(exported))
}

// TestDockerfile checks what can be checked without a Docker engine: the
// targets compose builds exist, every package built exists, the runtime is
// distroless and non-root.
func TestDockerfile(t *testing.T) {
	df := string(readFile(t, filepath.Join(composeDir, "Dockerfile")))
	stages := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^FROM\s+\S+\s+AS\s+(\S+)`).FindAllStringSubmatch(df, -1) {
		stages[m[1]] = true
	}
	for name, s := range loadCompose(t).Services {
		if s.Build != nil && !stages[s.Build["target"]] {
			t.Errorf("%s: build target %q is not a stage of the Dockerfile (%v)", name, s.Build["target"], slices.Sorted(maps.Keys(stages)))
		}
	}
	for _, b := range []string{"reserver", "router", "enginesim"} {
		if !stages[b] {
			t.Errorf("no per-binary target %s", b)
		}
	}
	build := regexp.MustCompile(`go build [^\n]*\\\n\s*(.*)`).FindStringSubmatch(df)
	if build == nil {
		t.Fatalf("no go build line in the Dockerfile")
	}
	for _, pkg := range strings.Fields(build[1]) {
		if _, err := os.Stat(filepath.Join("..", pkg, "main.go")); err != nil {
			t.Errorf("Dockerfile builds %s: %v", pkg, err)
		}
	}
	if !strings.Contains(df, "gcr.io/distroless/static") || !strings.Contains(df, "USER 65532") {
		t.Errorf("runtime stage: want distroless/static and a non-root USER")
	}
}
