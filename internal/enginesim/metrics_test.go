package enginesim

import (
	"bytes"
	"context"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/leasehold/leasehold/internal/telemetry"
)

func parseText(b []byte) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(bytes.NewReader(b))
}

func TestPyFloat(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		want string
	}{
		{0, "0.0"},
		{24, "24.0"},
		{21203, "21203.0"},
		{461328, "461328.0"},
		{1234567, "1.234567e+06"},
		{48213504, "4.8213504e+07"},
		{0.11989733985363993, "0.11989733985363993"},
		{1.7600123456419697e9, "1.7600123456419697e+09"},
		{0.5, "0.5"},
		{1e-05, "1e-05"},
	} {
		if got := pyFloat(tc.v); got != tc.want {
			t.Errorf("pyFloat(%v) = %q, want %q", tc.v, got, tc.want)
		}
	}
}

// Every format's /metrics parses as Prometheus text in full, and
// telemetry.Parse reads from it exactly the model's state.
func TestMetricsParseToModelState(t *testing.T) {
	for _, f := range telemetry.Formats {
		t.Run(string(f), func(t *testing.T) {
			e, ts := newServer(t, Config{KVTokens: 1024, Slots: 2, Format: f, manual: true, PrefillTokensPerSec: 1e9,
				Model: `meta-llama/Llama-3.1-8B-Instruct`})
			for range 3 {
				mustSubmit(t, e, 30, 40, 1) // 2 blocks each; TGI reserves 70 → 5 blocks
			}
			e.advance(5)
			st := e.Stats()
			if st.Running != 2 || st.Waiting != 1 || st.KVBlocksUsed != 6 {
				t.Fatalf("state: %+v", st)
			}

			body := e.Metrics()
			fams, err := parseText(body)
			if err != nil {
				t.Fatalf("not valid Prometheus text: %v\n%s", err, body)
			}
			s, err := telemetry.Parse(f, bytes.NewReader(body))
			if err != nil {
				t.Fatalf("telemetry.Parse: %v\n%s", err, body)
			}
			wantUsed := st.KVBlockTokensUsed
			if f == telemetry.FormatTGI {
				wantUsed = 2 * 5 * 16
				if !s.KVUsedIsReservation {
					t.Error("TGI usage should be a reservation")
				}
			}
			if s.Running != 2 || s.Waiting != 1 || s.KVTokensUsed != wantUsed || s.KVTokensTotal != 1024 ||
				!s.Known.Has(telemetry.KnownKVUsed|telemetry.KnownKVTotal|telemetry.KnownRunning|telemetry.KnownWaiting) {
				t.Fatalf("sample %+v, want running 2 waiting 1 used %d total 1024", s, wantUsed)
			}

			// Counters agree with the ground truth.
			counter := map[telemetry.Format]struct{ prompt, gen, preempt string }{
				telemetry.FormatVLLM:   {"vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:num_preemptions_total"},
				telemetry.FormatSGLang: {"sglang:prompt_tokens_total", "sglang:generation_tokens_total", "sglang:num_retracted_requests_total"},
			}
			if c, ok := counter[f]; ok {
				for name, want := range map[string]int64{c.prompt: st.PromptTokens, c.gen: st.GenerationTokens, c.preempt: st.Preemptions} {
					mf := fams[name]
					if mf == nil || len(mf.GetMetric()) != 1 || int64(mf.GetMetric()[0].GetCounter().GetValue()) != want {
						t.Errorf("%s = %v, want %d", name, mf, want)
					}
				}
			}

			// And through the scraper Leasehold's reconciler uses.
			sc := telemetry.Scraper{Client: ts.Client()}
			s2, _, err := sc.Scrape(context.Background(), ts.URL+"/metrics", f)
			if err != nil || s2 != s {
				t.Fatalf("scrape: %+v, %v; want %+v", s2, err, s)
			}

			// Idle: everything back to zero, capacity still reported.
			e.abortAll(ErrEngineFailure)
			s, err = telemetry.Parse(f, bytes.NewReader(e.Metrics()))
			if err != nil || s.Running != 0 || s.Waiting != 0 || s.KVTokensUsed != 0 || s.KVTokensTotal != 1024 {
				t.Fatalf("idle sample %+v, %v", s, err)
			}
		})
	}
}

// The vLLM scrape carries what capacity discovery reads.
func TestVLLMCacheConfig(t *testing.T) {
	e := newManual(t, Config{KVTokens: 1000, BlockSize: 16})
	fams, err := parseText(e.Metrics())
	if err != nil {
		t.Fatal(err)
	}
	mf := fams["vllm:cache_config_info"]
	if mf == nil {
		t.Fatal("no vllm:cache_config_info")
	}
	lbl := map[string]string{}
	for _, lp := range mf.GetMetric()[0].GetLabel() {
		lbl[lp.GetName()] = lp.GetValue()
	}
	if lbl["block_size"] != "16" || lbl["num_gpu_blocks"] != "62" || lbl["engine"] != "0" {
		t.Fatalf("labels %v: want block_size 16, num_gpu_blocks 62 (1000 tokens rounded down), engine 0", lbl)
	}
	if st := e.Stats(); st.KVCapacityTokens != 992 {
		t.Fatalf("capacity %d, want 992", st.KVCapacityTokens)
	}
}
