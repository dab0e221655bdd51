package enginesim

import (
	"errors"
	"flag"
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
