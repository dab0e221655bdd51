package route

import (
	"strings"
	"testing"
)

// A streamed answer's end ([DONE], and the usage chunk the client asked
// for) reaches the client with the answer's end, after the lease is
// released: a client that sends its next request on [DONE] finds the
// capacity free, on any router. Every token before it is flushed as it
// comes.
func TestStreamEndsAfterTheRelease(t *testing.T) {
	h := newHarness(t, harnessOpts{engines: 1, kv: 16384, slots: 64, speed: 20, output: 8, extra: tenants})
	for i := range 5 {
		s := h.mustStream(t, "stream", "sk-acme", map[string]any{"model": "m", "max_tokens": 64,
			"stream_options": map[string]any{"include_usage": true}, "messages": []map[string]any{{"role": "user", "content": "count"}}})
		var usage bool
		for {
			line, err := s.br.ReadString('\n')
			if err != nil {
				t.Fatalf("stream %d ended without [DONE]: %v", i, err)
			}
			usage = usage || strings.Contains(line, `"usage"`)
			if strings.TrimSpace(line) == "data: [DONE]" {
				break
			}
		}
		if st := h.stats(); st.Leases != 0 {
			t.Errorf("stream %d: [DONE] arrived while the ledger still held %d leases", i, st.Leases)
		}
		if !usage {
			t.Errorf("stream %d: no usage chunk before [DONE], though the client asked for it", i)
		}
		s.close()
	}
}
