package fleet

import (
	"testing"

	"github.com/leasehold/leasehold/internal/ledger"
)

func TestKeepConfigured(t *testing.T) {
	f, err := Parse([]byte(`
pools:
  - name: p
    engines:
      - {id: a, url: "http://127.0.0.1:9001", kv_tokens: 100, slots: 1}
      - {id: b, url: "http://127.0.0.1:9002", slots: 1}
      - {id: c, url: "http://127.0.0.1:9003", slots: 1}
tenants:
  - {name: t, api_keys: [k], kv_share: 1}
`))
	if err != nil {
		t.Fatal(err)
	}
	spec, waiting, err := f.PartialPoolSpec("p", nil)
	if err != nil || len(waiting) != 2 {
		t.Fatalf("PartialPoolSpec = %d engines, waiting %v, err %v; want a alone, b and c waiting", len(spec.Engines), waiting, err)
	}
	st := ledger.PoolStats{Engines: []ledger.EngineStats{
		{Spec: ledger.EngineSpec{ID: "c", KVTokens: 70, Slots: 1}},
		{Spec: ledger.EngineSpec{ID: "b", KVTokens: 50, Slots: 1}, Removed: true},
	}}
	got, still := f.KeepConfigured("p", spec, waiting, st)
	if len(got.Engines) != 2 || got.Engines[0].ID != "a" || got.Engines[1].ID != "c" || got.Engines[1].KVTokens != 70 {
		t.Errorf("KeepConfigured engines = %+v, want a then c (70 tokens, from the ledger)", got.Engines)
	}
	if len(still) != 1 || still[0].ID != "b" {
		t.Errorf("KeepConfigured still waiting = %v, want b only (removed in the ledger)", still)
	}
}
