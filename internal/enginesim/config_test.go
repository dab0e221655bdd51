package enginesim

import (
	"errors"
	"flag"
	"io"
	"math"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/telemetry"
)

func TestConfigFlagsAndEnv(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var c Config
	c.Register(fs)
	if err := fs.Parse([]string{"--listen", ":9001", "--kv-tokens", "400000", "--slots", "32", "--format", "sglang"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"ENGINESIM_SLOTS": "7", "ENGINESIM_SPEED": "50", "ENGINESIM_MODEL": "llama"}
	if err := ApplyEnv(fs, func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if c.Listen != ":9001" || c.KVTokens != 400000 || c.Slots != 32 || c.Format != telemetry.FormatSGLang ||
		c.Speed != 50 || c.Model != "llama" || c.BlockSize != 16 {
		t.Fatalf("config %+v: flags win over env, env over defaults", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.withDefaults().MaxModelLen != DefaultMaxModelLen {
		t.Fatalf("max model len %d", c.withDefaults().MaxModelLen)
	}
	env = map[string]string{"ENGINESIM_BLOCK_SIZE": "many"}
	if err := ApplyEnv(fs, func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), "ENGINESIM_BLOCK_SIZE") {
		t.Fatalf("bad env: %v", err)
	}
	if err := fs.Parse([]string{"--format", "triton"}); err == nil {
		t.Fatal("unknown format accepted")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		flag string
	}{
		{Config{KVTokens: 8}, "--kv-tokens"},
		{Config{BlockSize: -1}, "--block-size"},
		{Config{Slots: -3}, "--slots"},
		{Config{KVTokens: 1024, MaxModelLen: 2048}, "--max-model-len"},
		{Config{Speed: -1}, "--speed"},
		{Config{DecodeTokensPerSec: -5}, "--decode-tokens-per-sec"},
		{Config{PrefillTokensPerSec: -5}, "--prefill-tokens-per-sec"},
		{Config{OutputTokens: -1}, "--output-tokens"},
		{Config{OutputDist: "zipf"}, "--output-dist"},
		{Config{OutputSigma: -1}, "--output-sigma"},
		{Config{OutputSigma: 5.5}, "--output-sigma"},
		{Config{OutputSigma: math.NaN()}, "--output-sigma"},
		{Config{Format: "triton"}, "--format"},
	} {
		err := tc.c.Validate()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("%+v: %v, want an error naming %s", tc.c, err, tc.flag)
		}
		if _, err := New(tc.c); err == nil {
			t.Errorf("New(%+v) accepted", tc.c)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
}

// --output-dist and --output-sigma come from flags or the environment like
// every other flag; an unknown distribution is refused when parsed.
func TestConfigOutputDist(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		env   map[string]string
		dist  OutputDist
		sigma float64
	}{
		{"defaults", nil, nil, OutputUniform, DefaultOutputSigma},
		{"flags", []string{"--output-dist", "lognormal", "--output-sigma", "0.7"}, nil, OutputLognormal, 0.7},
		{"env", nil, map[string]string{"ENGINESIM_OUTPUT_DIST": "lognormal", "ENGINESIM_OUTPUT_SIGMA": "1.3"}, OutputLognormal, 1.3},
		{"flag over env", []string{"--output-dist", "uniform"}, map[string]string{"ENGINESIM_OUTPUT_DIST": "lognormal"}, OutputUniform, DefaultOutputSigma},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			var c Config
			c.Register(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if err := ApplyEnv(fs, func(k string) string { return tc.env[k] }); err != nil {
				t.Fatal(err)
			}
			if c.OutputDist != tc.dist || c.OutputSigma != tc.sigma {
				t.Fatalf("dist %q sigma %v, want %q %v", c.OutputDist, c.OutputSigma, tc.dist, tc.sigma)
			}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c Config
	c.Register(fs)
	if err := fs.Parse([]string{"--output-dist", "zipf"}); err == nil || !strings.Contains(err.Error(), "want uniform or lognormal") {
		t.Fatalf("--output-dist zipf: %v", err)
	}
	err := ApplyEnv(fs, func(k string) string { return map[string]string{"ENGINESIM_OUTPUT_DIST": "pareto"}[k] })
	if err == nil || !strings.Contains(err.Error(), "ENGINESIM_OUTPUT_DIST") {
		t.Fatalf("ENGINESIM_OUTPUT_DIST=pareto: %v", err)
	}
	c = Config{OutputSigma: 9}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--output-sigma = 9, want > 0 and <= 5") {
		t.Fatalf("sigma 9: %v", err)
	}
}
