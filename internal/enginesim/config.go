package enginesim

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/leasehold/leasehold/internal/flagenv"
	"github.com/leasehold/leasehold/internal/telemetry"
)

// Defaults of Config.
const (
	DefaultListen              = "127.0.0.1:8000"
	DefaultModel               = "enginesim"
	DefaultKVTokens            = 131072
	DefaultBlockSize           = 16
	DefaultSlots               = 256
	DefaultMaxModelLen         = 8192
	DefaultPrefillTokensPerSec = 10000
	DefaultDecodeTokensPerSec  = 50
	DefaultOutputTokens        = 128
	DefaultOutputDist          = OutputUniform
	DefaultOutputSigma         = 1.1
	DefaultSpeed               = 1
	// EnvPrefix prefixes the environment variable of every flag:
	// --kv-tokens is ENGINESIM_KV_TOKENS.
	EnvPrefix = "ENGINESIM_"
)

// ErrConfig: a Config field is out of range.
var ErrConfig = errors.New("enginesim: bad config")

// OutputDist is the distribution of natural output lengths (--output-dist).
type OutputDist string

// Output length distributions.
const (
	// OutputUniform: 1..2×OutputTokens−1, each length equally likely.
	OutputUniform OutputDist = "uniform"
	// OutputLognormal: median OutputTokens, log-standard-deviation
	// OutputSigma: a long tail, as real completions have.
	OutputLognormal OutputDist = "lognormal"
)

// maxOutputSigma bounds --output-sigma: beyond it nearly every length is
// 1 or the cap, which no real workload looks like.
const maxOutputSigma = 5

// parseOutputDist checks s names a distribution.
func parseOutputDist(s string) (OutputDist, error) {
	switch d := OutputDist(s); d {
	case OutputUniform, OutputLognormal:
		return d, nil
	}
	return "", fmt.Errorf("unknown output distribution %q, want uniform or lognormal", s)
}

// Config is the simulated engine's settings. The zero value of a field
// means its default, except where said.
type Config struct {
	// Listen is the HTTP address (used by cmd/enginesim only).
	Listen string
	// Model is the served model name: /v1/models, responses, metric labels.
	Model string
	// StrictModel rejects requests naming another model with 404, as vLLM
	// does; by default any model name is accepted and echoed.
	StrictModel bool
	// Format is the /metrics dialect; default vllm.
	Format telemetry.Format
	// KVTokens is the KV-cache capacity in tokens, rounded down to whole
	// blocks; default 131072.
	KVTokens int64
	// BlockSize is tokens per KV block; default 16.
	BlockSize int
	// Slots is the most sequences running at once (vLLM max_num_seqs);
	// default 256.
	Slots int
	// MaxModelLen bounds prompt + max_tokens of one sequence; default
	// min(8192, capacity). A request without max_tokens may generate up to
	// MaxModelLen − prompt tokens, and that is its admitted demand.
	MaxModelLen int
	// PrefillTokensPerSec is prefill speed, simulated tokens per second;
	// default 10000.
	PrefillTokensPerSec float64
	// DecodeTokensPerSec is decode speed per sequence: one step, which
	// gives every running sequence a token, takes 1/DecodeTokensPerSec
	// simulated seconds; default 50.
	DecodeTokensPerSec float64
	// OutputTokens is the natural output length in tokens: a sequence
	// stops after a deterministic pseudo-random length drawn from
	// OutputDist (from the request seed, prompt and sequence index) unless
	// max_tokens or the context is smaller or ignore_eos is set; the mean
	// of uniform, the median of lognormal; default 128.
	OutputTokens int
	// OutputDist is the distribution of natural output lengths: uniform
	// (1..2×OutputTokens−1) or lognormal (median OutputTokens, σ
	// OutputSigma, at least 1); default uniform.
	OutputDist OutputDist
	// OutputSigma is σ of the lognormal distribution, the standard
	// deviation of the log of the length (1.1 with median 80 puts p99 near
	// 1,000 tokens); 0 < σ <= 5, default 1.1; unused with uniform.
	OutputSigma float64
	// Speed is how many simulated seconds pass per wall-clock second;
	// default 1.
	Speed float64
	// Seed varies the generated lengths and text between engines; default 0.
	Seed uint64
	// MediaTokens is the prompt tokens each image, audio clip or video of
	// a chat request expands to, as a multimodal model's processor does;
	// default 0: the model takes none, and such a request is a 400.
	MediaTokens int

	// manual stops the scheduler goroutine: tests drive steps with advance.
	manual bool
}

// Register adds the flags of c to fs, with defaults filled in.
func (c *Config) Register(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", DefaultListen, "HTTP listen address")
	fs.StringVar(&c.Model, "model", DefaultModel, "served model name")
	fs.BoolVar(&c.StrictModel, "strict-model", false, "reject requests naming another model (404), as vLLM does")
	fs.Func("format", "metrics format: vllm, sglang or tgi (default vllm)", func(s string) error {
		f, err := telemetry.ParseFormat(s)
		c.Format = f
		return err
	})
	c.Format = telemetry.DefaultFormat
	fs.Int64Var(&c.KVTokens, "kv-tokens", DefaultKVTokens, "KV-cache capacity in tokens (rounded down to whole blocks)")
	fs.IntVar(&c.BlockSize, "block-size", DefaultBlockSize, "tokens per KV-cache block")
	fs.IntVar(&c.Slots, "slots", DefaultSlots, "most sequences running at once")
	fs.IntVar(&c.MaxModelLen, "max-model-len", 0, "most prompt + output tokens of one sequence (default min(8192, KV capacity))")
	fs.Float64Var(&c.PrefillTokensPerSec, "prefill-tokens-per-sec", DefaultPrefillTokensPerSec, "prefill speed in simulated tokens per second")
	fs.Float64Var(&c.DecodeTokensPerSec, "decode-tokens-per-sec", DefaultDecodeTokensPerSec, "decode speed per sequence in simulated tokens per second")
	fs.IntVar(&c.OutputTokens, "output-tokens", DefaultOutputTokens, "natural output length in tokens: the mean (uniform) or the median (lognormal)")
	fs.Func("output-dist", "distribution of natural output lengths: uniform or lognormal (default uniform)", func(s string) error {
		d, err := parseOutputDist(s)
		c.OutputDist = d
		return err
	})
	c.OutputDist = DefaultOutputDist
	fs.Float64Var(&c.OutputSigma, "output-sigma", DefaultOutputSigma, "σ of the lognormal output lengths (log-standard-deviation)")
	fs.Float64Var(&c.Speed, "speed", DefaultSpeed, "simulated seconds per wall-clock second")
	fs.Uint64Var(&c.Seed, "seed", 0, "seed of generated lengths and text")
	fs.IntVar(&c.MediaTokens, "media-tokens", 0, "prompt tokens per image, audio clip or video of a chat request (0: the model takes none, a 400)")
}

// ApplyEnv sets every flag of fs not given on the command line from its
// environment variable (EnvPrefix + the flag name upper-cased, "-" as "_");
// an empty variable counts as unset.
func ApplyEnv(fs *flag.FlagSet, getenv func(string) string) error {
	if getenv == nil {
		getenv = os.Getenv
	}
	return flagenv.Apply(fs, EnvPrefix, func(k string) (string, bool) {
		v := getenv(k)
		return v, v != ""
	})
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	orDefault(&c.Model, DefaultModel)
	orDefault(&c.Format, telemetry.DefaultFormat)
	orDefault(&c.KVTokens, DefaultKVTokens)
	orDefault(&c.BlockSize, DefaultBlockSize)
	orDefault(&c.Slots, DefaultSlots)
	orDefault(&c.PrefillTokensPerSec, DefaultPrefillTokensPerSec)
	orDefault(&c.DecodeTokensPerSec, DefaultDecodeTokensPerSec)
	orDefault(&c.OutputTokens, DefaultOutputTokens)
	orDefault(&c.OutputDist, DefaultOutputDist)
	orDefault(&c.OutputSigma, DefaultOutputSigma)
	orDefault(&c.Speed, DefaultSpeed)
	if c.MaxModelLen == 0 && c.BlockSize > 0 {
		c.MaxModelLen = int(min(DefaultMaxModelLen, c.KVTokens/int64(c.BlockSize)*int64(c.BlockSize)))
	}
	return c
}

// orDefault sets *p to d when *p is zero.
func orDefault[T comparable](p *T, d T) {
	var zero T
	if *p == zero {
		*p = d
	}
}

// Validate reports the first field of c (after defaults) that is out of
// range, naming the flag and the allowed values.
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, a...)...)
	}
	if _, err := telemetry.ParseFormat(string(c.Format)); err != nil {
		return bad("--format: %v", err)
	}
	if _, err := parseOutputDist(string(c.OutputDist)); err != nil {
		return bad("--output-dist: %v", err)
	}
	switch {
	case c.BlockSize < 1 || c.BlockSize > 4096:
		return bad("--block-size = %d, want 1..4096", c.BlockSize)
	case c.KVTokens < int64(c.BlockSize) || c.KVTokens > 1<<40:
		return bad("--kv-tokens = %d, want %d (one block) .. 2^40", c.KVTokens, c.BlockSize)
	case c.Slots < 1 || c.Slots > 1<<20:
		return bad("--slots = %d, want 1..1048576", c.Slots)
	case c.MaxModelLen < 2 || int64(c.MaxModelLen) > c.KVTokens/int64(c.BlockSize)*int64(c.BlockSize):
		return bad("--max-model-len = %d, want 2..%d (the KV capacity in whole blocks)", c.MaxModelLen, c.KVTokens/int64(c.BlockSize)*int64(c.BlockSize))
	case !(c.PrefillTokensPerSec > 0) || c.PrefillTokensPerSec > 1e12:
		return bad("--prefill-tokens-per-sec = %v, want > 0", c.PrefillTokensPerSec)
	case !(c.DecodeTokensPerSec > 0) || c.DecodeTokensPerSec > 1e9:
		return bad("--decode-tokens-per-sec = %v, want > 0 and <= 1e9", c.DecodeTokensPerSec)
	case c.OutputTokens < 1:
		return bad("--output-tokens = %d, want >= 1", c.OutputTokens)
	case !(c.OutputSigma > 0) || c.OutputSigma > maxOutputSigma:
		return bad("--output-sigma = %v, want > 0 and <= %d", c.OutputSigma, maxOutputSigma)
	case !(c.Speed > 0) || c.Speed > 1e6:
		return bad("--speed = %v, want > 0 and <= 1e6", c.Speed)
	case c.Model == "":
		return bad("--model is empty")
	case c.MediaTokens < 0 || c.MediaTokens > c.MaxModelLen:
		return bad("--media-tokens = %d, want 0..%d (--max-model-len)", c.MediaTokens, c.MaxModelLen)
	}
	return nil
}

// stepDuration is the simulated time of one decode step.
func (c Config) stepDuration() time.Duration {
	return max(time.Duration(float64(time.Second)/c.DecodeTokensPerSec), time.Nanosecond)
}

// naturalLength is the output length a sequence seeded by key stops at
// when nothing cuts it short (max_tokens, the context, ignore_eos,
// min_tokens are the caller's): one uniform draw from mix(key, 0), taken
// as is (uniform) or through the inverse normal CDF (lognormal). It is at
// least 1 and at most MaxModelLen.
func (c Config) naturalLength(key uint64) int {
	r := mix(key, 0)
	if c.OutputDist != OutputLognormal {
		return 1 + int(r%uint64(2*c.OutputTokens-1))
	}
	u := (float64(r>>11) + 0.5) / (1 << 53) // in (0, 1): never ±Inf below
	z := math.Sqrt2 * math.Erfinv(2*u-1)
	n := math.Round(float64(c.OutputTokens) * math.Exp(c.OutputSigma*z))
	return int(min(max(n, 1), float64(c.MaxModelLen)))
}
