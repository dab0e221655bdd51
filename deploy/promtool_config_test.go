package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPromtoolCheckConfig: the compose Prometheus configuration checks
// outside its container, as a newcomer runs it from the repository root:
// `promtool check config deploy/compose/prometheus.yml`. Its rule files
// are relative to it, so they resolve to deploy/prometheus/ here and to
// their mounts in the container (TestPrometheusConfig); each exists here.
// promtool is required where LEASEHOLD_REQUIRE_PROMTOOL is set (CI).
func TestPromtoolCheckConfig(t *testing.T) {
	var p promConfig
	decodeYAML(t, filepath.Join(composeDir, "prometheus.yml"), &p)
	if len(p.RuleFiles) == 0 {
		t.Fatal("the compose Prometheus loads no rule files")
	}
	for _, rf := range p.RuleFiles {
		if filepath.IsAbs(rf) {
			t.Errorf("rule file %s: absolute, so it resolves only inside the container", rf)
		} else if _, err := os.Stat(filepath.Join(composeDir, rf)); err != nil {
			t.Errorf("rule file %s: %v", rf, err)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("LEASEHOLD_REQUIRE_PROMTOOL") != "" {
			t.Fatalf("LEASEHOLD_REQUIRE_PROMTOOL is set but promtool is not on PATH (apt-get install -y prometheus)")
		}
		t.Skip("promtool not installed (apt-get install -y prometheus); the rule files' paths were checked above")
	}
	cmd := exec.Command(promtool, "check", "config", filepath.Join("deploy", "compose", "prometheus.yml"))
	cmd.Dir = ".." // the repository root, as the README's reader runs it
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SUCCESS") {
		t.Errorf("promtool check config deploy/compose/prometheus.yml: %v\n%s", err, out)
	}
}
