package telemetry

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/ledger"
)

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var fixtures = []struct {
	file   string
	format Format
	want   Sample
}{
	{
		// README: num_gpu_blocks 28833 × block_size 16 = 461,328 tokens;
		// usage 0.11989733985363993 = 1 − 25376/28833 → 3,457 blocks × 16.
		file: "vllm-v1.metrics.txt", format: FormatVLLM,
		want: Sample{Format: FormatVLLM, KVTokensUsed: 3457 * 16, KVTokensTotal: 28833 * 16, Running: 24, Waiting: 0,
			Known: KnownKVUsed | KnownKVTotal | KnownRunning | KnownWaiting, Ranks: 1},
	},
	{
		// README: num_used_tokens 58,066; max_total_num_tokens 483,912.
		file: "sglang.metrics.txt", format: FormatSGLang,
		want: Sample{Format: FormatSGLang, KVTokensUsed: 58066, KVTokensTotal: 483912, Running: 24, Waiting: 0,
			Known: KnownKVUsed | KnownKVTotal | KnownRunning | KnownWaiting, Ranks: 1},
	},
	{
		// README: batch_current_max_tokens 80,106 (a reservation);
		// batch_max_total_tokens 449,872; 24 running, queue 0.
		file: "tgi.metrics.txt", format: FormatTGI,
		want: Sample{Format: FormatTGI, KVTokensUsed: 80106, KVTokensTotal: 449872, Running: 24, Waiting: 0,
			Known: KnownKVUsed | KnownKVTotal | KnownRunning | KnownWaiting, KVUsedIsReservation: true, Ranks: 1},
	},
}

func TestParseFixtures(t *testing.T) {
	for _, fx := range fixtures {
		t.Run(fx.file, func(t *testing.T) {
			got, err := Parse(fx.format, bytes.NewReader(fixture(t, fx.file)))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got != fx.want {
				t.Errorf("Parse:\n got %+v\nwant %+v", got, fx.want)
			}
		})
	}
}

// requiredFamilies are the families each format cannot do without.
var requiredFamilies = map[Format][]string{
	FormatVLLM:   {vllmRunning, vllmWaiting, vllmUsage, vllmCacheConfig},
	FormatSGLang: {sglangRunning, sglangWaiting, sglangUsed, sglangTotal},
	FormatTGI:    {tgiRunning, tgiWaiting, tgiReserved},
}

// dropFamily removes every line about family name from a scrape.
func dropFamily(b []byte, name string) []byte {
	var out bytes.Buffer
	for line := range bytes.Lines(b) {
		if lineFamily(bytes.TrimRight(line, "\n")) != name {
			out.Write(line)
		}
	}
	return out.Bytes()
}

// TestParseMissingRequired: a required metric missing from a real scrape is
// an error naming it, never zero load.
func TestParseMissingRequired(t *testing.T) {
	for _, fx := range fixtures {
		for _, fam := range requiredFamilies[fx.format] {
			t.Run(fx.file+"/without_"+fam, func(t *testing.T) {
				in := dropFamily(fixture(t, fx.file), fam)
				got, err := Parse(fx.format, bytes.NewReader(in))
				if !errors.Is(err, ErrMissingMetric) {
					t.Fatalf("Parse = %+v, %v; want ErrMissingMetric", got, err)
				}
				if !strings.Contains(err.Error(), fam) {
					t.Errorf("error %q does not name %s", err, fam)
				}
			})
		}
	}
}

func TestParseTGIWithoutCapacity(t *testing.T) {
	in := dropFamily(fixture(t, "tgi.metrics.txt"), tgiTotal)
	got, err := Parse(FormatTGI, bytes.NewReader(in))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got.Known.Has(KnownKVTotal) || got.KVTokensTotal != 0 {
		t.Errorf("Known = %v, KVTokensTotal = %d; want kv_total unknown and 0", got.Known, got.KVTokensTotal)
	}
	if got.KVTokensUsed != 80106 || got.Running != 24 {
		t.Errorf("got %+v, want used 80106 running 24", got)
	}
}

const vllmDP = `# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 10.0
vllm:num_requests_running{engine="1",model_name="m"} 7.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 2.0
vllm:num_requests_waiting{engine="1",model_name="m"} 1.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.25
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="1000"} 1.0
vllm:cache_config_info{block_size="32",engine="1",num_gpu_blocks="400"} 1.0
`

const sglangDP = `# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank="0",tp_rank="0"} 5.0
sglang:num_running_reqs{dp_rank="0",tp_rank="1"} 5.0
sglang:num_running_reqs{dp_rank="1",tp_rank="0"} 3.0
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{dp_rank="0",tp_rank="0"} 1.0
sglang:num_queue_reqs{dp_rank="1",tp_rank="0"} 4.0
# TYPE sglang:num_used_tokens gauge
sglang:num_used_tokens{dp_rank="0",tp_rank="0"} 1000.0
sglang:num_used_tokens{dp_rank="0",tp_rank="1"} 1200.0
sglang:num_used_tokens{dp_rank="1",tp_rank="0"} 500.0
# TYPE sglang:max_total_num_tokens gauge
sglang:max_total_num_tokens{dp_rank="0",tp_rank="0"} 100000.0
sglang:max_total_num_tokens{dp_rank="0",tp_rank="1"} 90000.0
sglang:max_total_num_tokens{dp_rank="1",tp_rank="0"} 100000.0
`

func TestParse(t *testing.T) {
	all := KnownKVUsed | KnownKVTotal | KnownRunning | KnownWaiting
	tests := []struct {
		name    string
		format  Format
		in      string
		want    Sample
		wantErr error
		errHas  string
	}{
		{
			name: "vllm data-parallel engines are summed", format: FormatVLLM, in: vllmDP,
			want: Sample{Format: FormatVLLM, KVTokensUsed: 500*16 + 100*32, KVTokensTotal: 1000*16 + 400*32,
				Running: 17, Waiting: 3, Known: all, Ranks: 2},
		},
		{
			name: "vllm v0.8 gpu_cache_usage_perc", format: FormatVLLM,
			in: strings.ReplaceAll(vllmDP, "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
			want: Sample{Format: FormatVLLM, KVTokensUsed: 500*16 + 100*32, KVTokensTotal: 1000*16 + 400*32,
				Running: 17, Waiting: 3, Known: all, Ranks: 2},
		},
		{
			name: "vllm prefers kv_cache_usage_perc over the legacy gauge", format: FormatVLLM,
			in: vllmDP + "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc{engine=\"0\"} 0.9\nvllm:gpu_cache_usage_perc{engine=\"1\"} 0.9\n",
			want: Sample{Format: FormatVLLM, KVTokensUsed: 500*16 + 100*32, KVTokensTotal: 1000*16 + 400*32,
				Running: 17, Waiting: 3, Known: all, Ranks: 2},
		},
		{
			name: "vllm kv_cache_size_tokens is group-aware capacity", format: FormatVLLM,
			in: `vllm:num_requests_running 3
vllm:num_requests_waiting 0
vllm:kv_cache_usage_perc 0.1
vllm:cache_config_info{block_size="16",num_gpu_blocks="1000",kv_cache_size_tokens="50000"} 1
`,
			want: Sample{Format: FormatVLLM, KVTokensUsed: 5000, KVTokensTotal: 50000, Running: 3, Known: all, Ranks: 1},
		},
		{
			name: "vllm one unlabelled cache config serves every engine", format: FormatVLLM,
			in: `vllm:num_requests_running{engine="0"} 1
vllm:num_requests_running{engine="1"} 1
vllm:num_requests_waiting{engine="0"} 0
vllm:num_requests_waiting{engine="1"} 0
vllm:kv_cache_usage_perc{engine="0"} 0.5
vllm:kv_cache_usage_perc{engine="1"} 0
vllm:cache_config_info{block_size="16",num_gpu_blocks="100"} 1
`,
			want: Sample{Format: FormatVLLM, KVTokensUsed: 800, KVTokensTotal: 3200, Running: 2, Known: all, Ranks: 2},
		},
		{
			name: "vllm usage for an engine with no cache config", format: FormatVLLM,
			in:      strings.Replace(vllmDP, `vllm:cache_config_info{block_size="32",engine="1",num_gpu_blocks="400"} 1.0`+"\n", "", 1),
			wantErr: ErrMissingMetric, errHas: `engine "1"`,
		},
		{
			name: "vllm cache config without num_gpu_blocks", format: FormatVLLM,
			in:      strings.ReplaceAll(vllmDP, `num_gpu_blocks="400"`, `num_gpu_blocks="None"`),
			wantErr: ErrMissingMetric, errHas: "num_gpu_blocks",
		},
		{
			name: "vllm non-numeric block_size", format: FormatVLLM,
			in:      strings.ReplaceAll(vllmDP, `block_size="32"`, `block_size="big"`),
			wantErr: ErrBadMetric, errHas: "block_size",
		},
		{
			name: "vllm usage above 1", format: FormatVLLM,
			in:      strings.ReplaceAll(vllmDP, "} 0.25", "} 1.5"),
			wantErr: ErrBadMetric, errHas: "want 0..1",
		},
		{
			name: "vllm NaN running", format: FormatVLLM,
			in:      strings.ReplaceAll(vllmDP, "} 10.0", "} NaN"),
			wantErr: ErrBadMetric, errHas: vllmRunning,
		},
		{
			name: "vllm negative waiting", format: FormatVLLM,
			in:      strings.ReplaceAll(vllmDP, "} 2.0", "} -2.0"),
			wantErr: ErrBadMetric, errHas: vllmWaiting,
		},
		{
			name: "vllm running beyond the ledger's range", format: FormatVLLM,
			in:      strings.ReplaceAll(vllmDP, "} 10.0", "} 1e300"),
			wantErr: ErrBadMetric, errHas: "more than",
		},
		{
			name: "sglang data-parallel ranks summed, tensor ranks merged", format: FormatSGLang, in: sglangDP,
			// dp0: max(1000,1200) used, min(100000,90000) total; dp1: 500, 100000.
			want: Sample{Format: FormatSGLang, KVTokensUsed: 1700, KVTokensTotal: 190000, Running: 8, Waiting: 5, Known: all, Ranks: 2},
		},
		{
			name: "empty scrape", format: FormatSGLang, in: "",
			wantErr: ErrMissingMetric, errHas: sglangRunning,
		},
		{
			name: "malformed line in an unknown family is skipped", format: FormatTGI,
			in: "tgi_weird{ this is not prometheus\n# TYPE tgi_request_count counter\ntgi_request_count 5\n" +
				"tgi_queue_size 2\ntgi_batch_current_size 3\ntgi_batch_current_max_tokens 900\n",
			want: Sample{Format: FormatTGI, KVTokensUsed: 900, Running: 3, Waiting: 2,
				Known: KnownKVUsed | KnownRunning | KnownWaiting, KVUsedIsReservation: true, Ranks: 1},
		},
		{
			name: "malformed line in a known family", format: FormatTGI,
			in:      "tgi_queue_size two\ntgi_batch_current_size 3\ntgi_batch_current_max_tokens 900\n",
			wantErr: ErrBadMetric,
		},
		{
			name: "histogram where a gauge belongs", format: FormatTGI,
			in:      "# TYPE tgi_queue_size histogram\ntgi_queue_size_count 1\ntgi_queue_size_sum 1\ntgi_queue_size_bucket{le=\"+Inf\"} 1\ntgi_batch_current_size 3\ntgi_batch_current_max_tokens 900\n",
			wantErr: ErrMissingMetric, errHas: tgiWaiting,
		},
		{
			name: "tgi fresh router before its first batch", format: FormatTGI,
			in:      "tgi_queue_size 0\n",
			wantErr: ErrMissingMetric, errHas: tgiRunning,
		},
		{
			name: "unknown format", format: "triton", in: "",
			wantErr: ErrUnknownFormat,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.format, strings.NewReader(tt.in))
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Parse = %+v, %v; want error %v", got, err, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.errHas) {
					t.Errorf("error %q does not contain %q", err, tt.errHas)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got != tt.want {
				t.Errorf("Parse:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseFormat(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Format
		ok   bool
	}{{"", FormatVLLM, true}, {"vllm", FormatVLLM, true}, {"sglang", FormatSGLang, true}, {"tgi", FormatTGI, true}, {"VLLM", "", false}, {"triton", "", false}} {
		got, err := ParseFormat(tt.in)
		if got != tt.want || (err == nil) != tt.ok {
			t.Errorf("ParseFormat(%q) = %q, %v; want %q, ok=%v", tt.in, got, err, tt.want, tt.ok)
		}
		if !tt.ok && !strings.Contains(err.Error(), "vllm, sglang or tgi") {
			t.Errorf("ParseFormat(%q) error %q does not list the allowed values", tt.in, err)
		}
	}
}

func TestKnownString(t *testing.T) {
	for k, want := range map[Known]string{0: "none", KnownKVUsed | KnownRunning: "kv_used|running", KnownKVTotal | KnownWaiting: "kv_total|waiting"} {
		if got := k.String(); got != want {
			t.Errorf("Known(%d).String() = %q, want %q", k, got, want)
		}
	}
}

// FuzzParse: no input panics, and whatever parses is in the ledger's range
// and says what it knows.
func FuzzParse(f *testing.F) {
	for _, fx := range fixtures {
		f.Add(string(fx.format), fixture(f, fx.file))
	}
	f.Add(string(FormatVLLM), []byte(vllmDP))
	f.Add(string(FormatSGLang), []byte(sglangDP))
	f.Fuzz(func(t *testing.T, format string, in []byte) {
		s, err := Parse(Format(format), bytes.NewReader(in))
		if err != nil {
			return
		}
		for _, v := range []int64{s.KVTokensUsed, s.KVTokensTotal, s.Running, s.Waiting} {
			if v < 0 || v > ledger.MaxAmount {
				t.Fatalf("out of range: %+v", s)
			}
		}
		if !s.Known.Has(KnownKVUsed | KnownRunning | KnownWaiting) {
			t.Fatalf("parsed without required quantities: %+v", s)
		}
		if !s.Known.Has(KnownKVTotal) && s.KVTokensTotal != 0 {
			t.Fatalf("unknown total is not zero: %+v", s)
		}
	})
}
