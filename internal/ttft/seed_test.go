package ttft

import (
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/telemetry"
)

// The engine fixtures (internal/telemetry/testdata, a copy of the shared
// ones) give each format's seed: vLLM 2,266 prompt tokens over 0.2315 s;
// SGLang 48,047,011 tokens over 4,941 s of TTFT; TGI 2,264 input tokens
// over 0.0188 s queued + 0.0720 s of prefill forward.
func TestParseSeedFixtures(t *testing.T) {
	for _, tc := range []struct {
		file string
		f    telemetry.Format
		want float64
	}{
		{"vllm-v1.metrics.txt", telemetry.FormatVLLM, (48047011.0 / 21203) / (4911.623418092728 / 21219)},
		{"sglang.metrics.txt", telemetry.FormatSGLang, 4.8047011e+07 / 4941.06102848053},
		{"tgi.metrics.txt", telemetry.FormatTGI, (48102211.0 / 21247) / (398.17720431/21203 + 1431.86011927/19874)},
	} {
		t.Run(string(tc.f), func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("..", "telemetry", "testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			rate, ok, err := ParseSeed(tc.f, strings.NewReader(string(b)))
			if err != nil || !ok || math.Abs(rate-tc.want)/tc.want > 1e-9 {
				t.Errorf("ParseSeed = %v, %v, %v; want %v", rate, ok, err, tc.want)
			}
		})
	}
}

// No figures, too few requests or an unknown format give no seed.
func TestParseSeedNone(t *testing.T) {
	few := `# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="+Inf"} 3
vllm:time_to_first_token_seconds_sum 0.6
vllm:time_to_first_token_seconds_count 3
# TYPE vllm:request_prompt_tokens histogram
vllm:request_prompt_tokens_bucket{le="+Inf"} 3
vllm:request_prompt_tokens_sum 3000
vllm:request_prompt_tokens_count 3
`
	for _, tc := range []struct {
		name, body string
		f          telemetry.Format
		err        bool
	}{
		{"enginesim-like: no TTFT", "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n", telemetry.FormatVLLM, false},
		{"three requests", few, telemetry.FormatVLLM, false},
		{"unknown format", few, telemetry.Format("triton"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rate, ok, err := ParseSeed(tc.f, strings.NewReader(tc.body))
			if ok || (err != nil) != tc.err {
				t.Errorf("ParseSeed = %v, %v, %v; want no seed, error %v", rate, ok, err, tc.err)
			}
		})
	}
}

// SeedPool scrapes each engine once it answers, and seeds those whose
// metrics give a rate.
func TestSeedPool(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "telemetry", "testdata", "vllm-v1.metrics.txt"))
	if err != nil {
		t.Fatal(err)
	}
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits++; _, _ = w.Write(b) }))
	defer srv.Close()
	e, _ := newTest(nil)
	engines := []fleet.Engine{
		{ID: "vllm", MetricsURL: srv.URL, Format: telemetry.FormatVLLM},
		{ID: "down", MetricsURL: "http://127.0.0.1:1/metrics", Format: telemetry.FormatVLLM},
	}
	for range 2 {
		e.SeedPool(t.Context(), srv.Client(), time.Second, "p", engines)
	}
	if hits != 1 {
		t.Errorf("the engine's metrics were read %d times, want once", hits)
	}
	if est := e.Estimate("p", "vllm", 2266); !est.Warm || !near(est.Expected, 231*time.Millisecond, 0.01) {
		t.Errorf("seeded engine: %+v, want warm and about 231ms for the fixture's mean prompt", est)
	}
	if est := e.Estimate("p", "down", 1000); est.Warm {
		t.Errorf("an engine whose metrics did not answer reads warm")
	}
}
