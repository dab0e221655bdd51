package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

type recordingRule struct {
	Record string `yaml:"record"`
	Expr   string `yaml:"expr"`
}

// loadRecordingRules reads deploy/prometheus/rules.yml.
func loadRecordingRules(t *testing.T) []recordingRule {
	t.Helper()
	var f struct {
		Groups []struct {
			Name     string          `yaml:"name"`
			Interval string          `yaml:"interval"`
			Rules    []recordingRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	decodeYAML(t, filepath.Join("prometheus", "rules.yml"), &f)
	var rules []recordingRule
	for _, g := range f.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("rules.yml group %q: needs a name and rules", g.Name)
		}
		rules = append(rules, g.Rules...)
	}
	return rules
}

// recordName is Prometheus's level:metric:operations convention.
var recordName = regexp.MustCompile(`^[a-z_]+:[a-z_]+:[a-z0-9_]+$`)

// TestRecordingRules: the autoscaling signal is recorded per pool (and per
// class) from the router's once-per-request counters, named by the
// convention, each name once; every metric the expressions read is
// exported (TestQueriedMetricsAreExported). With promtool installed the
// file is also checked and its unit tests (rules_test.yml) run.
func TestRecordingRules(t *testing.T) {
	rules := loadRecordingRules(t)
	seen := map[string]bool{}
	for _, r := range rules {
		if !recordName.MatchString(r.Record) || r.Expr == "" {
			t.Errorf("rule %q: want a level:metric:operations name and an expr", r.Record)
		}
		if seen[r.Record] {
			t.Errorf("%s recorded twice", r.Record)
		}
		seen[r.Record] = true
	}
	for _, want := range []struct{ record, uses string }{
		{"pool:leasehold_router_refused_requests:ratio_rate5m", "leasehold_router_refused_requests_total"},
		{"pool:leasehold_router_refused_requests:ratio_rate5m", "leasehold_router_admission_requests_total"},
		{"pool_priority:leasehold_router_refused_requests:ratio_rate5m", "leasehold_router_refused_requests_total"},
		{"pool:leasehold_ledger_reserved_kv_tokens:ratio", "leasehold_ledger_capacity_kv_tokens"},
	} {
		i := slices.IndexFunc(rules, func(r recordingRule) bool { return r.Record == want.record })
		if i < 0 {
			t.Errorf("no rule records %s", want.record)
			continue
		}
		if !strings.Contains(rules[i].Expr, "[5m]") && strings.HasSuffix(want.record, "rate5m") {
			t.Errorf("%s: not over 5 minutes: %s", want.record, rules[i].Expr)
		}
		refs, _ := promqlRefs(rules[i].Expr)
		if !slices.ContainsFunc(refs, func(r metricRef) bool { return r.name == want.uses }) {
			t.Errorf("%s does not read %s: %s", want.record, want.uses, rules[i].Expr)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("LEASEHOLD_REQUIRE_PROMTOOL") != "" {
			t.Fatalf("LEASEHOLD_REQUIRE_PROMTOOL is set but promtool is not on PATH (apt-get install -y prometheus)")
		}
		t.Logf("promtool not installed: rules.yml checked by structure only")
		return
	}
	for _, args := range [][]string{{"check", "rules", "rules.yml", "alerts.yml"}, {"test", "rules", "rules_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// TestEngineScaledObject: the KEDA example scales a Deployment of engines
// (a placeholder, never the router), on the recorded refusal ratio at 5%
// and the leased share of capacity, both recorded by rules.yml.
func TestEngineScaledObject(t *testing.T) {
	path := filepath.Join("k8s", "engine-scaledobject.example.yaml")
	docs := yamlDocs(t, path)
	if len(docs) != 1 || docs[0]["kind"] != "ScaledObject" || !strings.HasPrefix(str(docs[0]["apiVersion"]), "keda.sh/") {
		t.Fatalf("%s: want one keda.sh ScaledObject", path)
	}
	so := docs[0]
	target := get(so, "spec", "scaleTargetRef")
	if get(target, "kind") != "Deployment" || str(get(target, "name")) == "" || strings.HasPrefix(str(get(target, "name")), "leasehold-") {
		t.Errorf("scaleTargetRef %v: want the engines' Deployment (a placeholder), not a Leasehold one", target)
	}
	recorded := map[string]bool{}
	for _, r := range loadRecordingRules(t) {
		recorded[r.Record] = true
	}
	thresholds := map[string]string{}
	triggers, _ := get(so, "spec", "triggers").([]any)
	for _, tr := range triggers {
		if get(tr, "type") != "prometheus" || get(tr, "metricType") != "Value" {
			t.Errorf("trigger %v: want type prometheus, metricType Value (a ratio, not a per-replica average)", tr)
		}
		q := str(get(tr, "metadata", "query"))
		refs, _ := promqlRefs(q)
		for _, r := range refs {
			if !recorded[r.name] {
				t.Errorf("trigger query %q reads %s, which rules.yml does not record", q, r.name)
			}
			thresholds[r.name] = str(get(tr, "metadata", "threshold"))
		}
	}
	if got := thresholds["pool:leasehold_router_refused_requests:ratio_rate5m"]; got != "0.05" {
		t.Errorf("refusal-ratio trigger threshold %q, want \"0.05\" (5%% over 5 minutes)", got)
	}
	if _, ok := thresholds["pool:leasehold_ledger_reserved_kv_tokens:ratio"]; !ok {
		t.Errorf("no trigger on the leased share of capacity: nothing would hold the pool up once refusals stop")
	}
	if get(so, "spec", "advanced", "horizontalPodAutoscalerConfig", "behavior", "scaleDown", "stabilizationWindowSeconds") == nil {
		t.Errorf("no scale-down stabilization window")
	}
}
