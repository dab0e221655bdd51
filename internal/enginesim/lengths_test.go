package enginesim

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

// quantiles returns the q-quantiles of the natural lengths of keys 0..n-1.
func quantiles(c Config, n int, qs ...float64) []int {
	ls := make([]int, n)
	for k := range ls {
		ls[k] = c.naturalLength(uint64(k))
	}
	slices.Sort(ls)
	out := make([]int, len(qs))
	for i, q := range qs {
		out[i] = ls[int(q*float64(n-1))]
	}
	return out
}

// The default distribution is today's: 1..2×OutputTokens−1 from mix(key, 0).
func TestNaturalLengthUniformIsUnchanged(t *testing.T) {
	for _, c := range []Config{{OutputTokens: 1}, {OutputTokens: 8}, {OutputTokens: 128, OutputDist: OutputUniform}} {
		c = c.withDefaults()
		if c.OutputDist != OutputUniform {
			t.Fatalf("default distribution %q, want uniform", c.OutputDist)
		}
		for k := range uint64(5000) {
			want := 1 + int(mix(k, 0)%uint64(2*c.OutputTokens-1))
			if got := c.naturalLength(k); got != want {
				t.Fatalf("output tokens %d, key %d: length %d, want %d", c.OutputTokens, k, got, want)
			}
		}
	}
}

// Lognormal lengths: --output-tokens is the median, p99 is median ×
// e^(2.326σ), every length is at least 1 and at most the context, and a
// key always gets the same length.
func TestNaturalLengthLognormal(t *testing.T) {
	const keys = 200000
	for _, tc := range []struct {
		median int
		sigma  float64
	}{
		{80, 1.1}, // the benchmark's workload: p99 ≈ 1,000
		{60, 1.2},
		{128, 0.3},
		{1, 1.1},
	} {
		t.Run(fmt.Sprintf("median %d sigma %v", tc.median, tc.sigma), func(t *testing.T) {
			c := Config{OutputTokens: tc.median, OutputDist: OutputLognormal, OutputSigma: tc.sigma}.withDefaults()
			q := quantiles(c, keys, 0, 0.5, 0.99)
			wantP99 := float64(tc.median) * math.Exp(2.3263*tc.sigma)
			t.Logf("min %d, median %d, p99 %d (want %.0f)", q[0], q[1], q[2], wantP99)
			if q[0] < 1 {
				t.Errorf("min length %d, want >= 1", q[0])
			}
			if d := math.Abs(float64(q[1]) - float64(tc.median)); d > 0.03*float64(tc.median)+1 {
				t.Errorf("median %d, want %d ± 3%%", q[1], tc.median)
			}
			if d := math.Abs(float64(q[2])-wantP99) / wantP99; d > 0.06 && math.Abs(float64(q[2])-wantP99) > 1 {
				t.Errorf("p99 %d, want %.0f ± 6%%", q[2], wantP99)
			}
			for k := range uint64(1000) {
				if a, b := c.naturalLength(k), c.naturalLength(k); a != b {
					t.Fatalf("key %d: lengths %d then %d", k, a, b)
				}
			}
		})
	}
	c := Config{OutputTokens: 80, OutputDist: OutputLognormal, OutputSigma: 1.1}.withDefaults()
	if q := quantiles(c, keys, 0.99); q[0] < 900 || q[0] > 1150 {
		t.Errorf("median 80, σ 1.1: p99 %d, want about 1,000", q[0])
	}
	// The widest σ stays within 1..MaxModelLen.
	c = Config{OutputTokens: 80, OutputDist: OutputLognormal, OutputSigma: maxOutputSigma, MaxModelLen: 2048}.withDefaults()
	if q := quantiles(c, keys, 0, 1); q[0] != 1 || q[1] != 2048 {
		t.Errorf("σ %d: lengths %d..%d, want 1..2048", maxOutputSigma, q[0], q[1])
	}
}

// Over HTTP, a lognormal engine answers a request with its natural
// length, capped by max_tokens, the same every time.
func TestLognormalLengthsOverHTTP(t *testing.T) {
	cfg := fastConfig()
	cfg.OutputDist, cfg.OutputTokens = OutputLognormal, 20
	_, ts := newServer(t, cfg)
	complete := func(body string) answer {
		t.Helper()
		status, b := do(t, ts, "POST", "/v1/completions", body)
		if status != 200 {
			t.Fatalf("%s: %d %s", body, status, b)
		}
		return parseAnswer(t, b, false, false)
	}
	var lengths []int
	for seed := range 101 {
		body := fmt.Sprintf(`{"prompt":"a b","seed":%d,"max_tokens":4000}`, seed)
		a, b := complete(body), complete(body)
		if a.usage.CompletionTokens != b.usage.CompletionTokens || a.texts[0] != b.texts[0] {
			t.Fatalf("seed %d: %d then %d tokens", seed, a.usage.CompletionTokens, b.usage.CompletionTokens)
		}
		if n := a.usage.CompletionTokens; n > 5 {
			capped := complete(fmt.Sprintf(`{"prompt":"a b","seed":%d,"max_tokens":5}`, seed))
			if capped.usage.CompletionTokens != 5 || capped.finish[0] != finishLength {
				t.Fatalf("seed %d (natural %d) with max_tokens 5: %d tokens, finish %q", seed, n, capped.usage.CompletionTokens, capped.finish[0])
			}
		}
		lengths = append(lengths, a.usage.CompletionTokens)
	}
	slices.Sort(lengths)
	if lengths[0] < 1 || lengths[50] < 13 || lengths[50] > 30 || lengths[100] < 60 {
		t.Fatalf("lengths min %d median %d max %d of 101: want >= 1, about 20, a long tail", lengths[0], lengths[50], lengths[100])
	}
}
