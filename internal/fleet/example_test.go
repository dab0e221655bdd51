package fleet_test

import (
	"fmt"

	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/telemetry"
)

// exampleFleet is one pool of two engines, gpu-1 without a configured
// capacity, and one tenant.
const exampleFleet = `
pools:
  - name: llama-3-70b
    engines:
      - {id: gpu-0, url: "http://127.0.0.1:9001", kv_tokens: 400000, slots: 256}
      - {id: gpu-1, url: "http://127.0.0.1:9002", slots: 256}   # capacity from metrics
tenants:
  - {name: acme, api_keys: ["sk-acme-1"], kv_share: 0.5}
priorities:
  - {name: interactive, max_fill: 0.95}
  - {name: batch, max_fill: 0.70}
`

func Example() {
	f, err := fleet.Parse([]byte(exampleFleet))
	if err != nil {
		fmt.Println(err)
		return
	}
	tenant, ok := f.TenantForKey("sk-acme-1")
	fmt.Println("tenant:", tenant, ok, "default priority:", f.DefaultPriority)

	// gpu-1's capacity is unknown until its metrics are scraped.
	_, err = f.PoolSpecs(nil)
	fmt.Println(err)

	// The reconciler discovered 461,328 tokens (vLLM: 28833 blocks × 16);
	// headroom 0.9 admits 415,195 of them.
	specs, _ := f.PoolSpecs(map[telemetry.EngineKey]int64{{Pool: "llama-3-70b", Engine: "gpu-1"}: 461328})
	for _, e := range specs[0].Engines {
		fmt.Println(e.ID, e.KVTokens, e.Slots)
	}
	// Output:
	// tenant: acme true default priority: interactive
	// fleet: engine KV capacity unknown: pool llama-3-70b engine gpu-1: kv_tokens is not configured and its vllm metrics at http://127.0.0.1:9002/metrics have not reported a capacity yet
	// gpu-0 400000 256
	// gpu-1 415195 256
}

func ExampleFleet_PartialPoolSpec() {
	f, err := fleet.Parse([]byte(exampleFleet))
	if err != nil {
		fmt.Println(err)
		return
	}
	// gpu-1 has not reported yet: the pool is configured with gpu-0 alone,
	// and acme's quota is half of gpu-0 until gpu-1 joins.
	spec, waiting, err := f.PartialPoolSpec("llama-3-70b", nil)
	fmt.Println(len(spec.Engines), spec.Engines[0].ID, err)
	for _, w := range waiting {
		fmt.Println("waiting:", w.ID)
	}
	// Output:
	// 1 gpu-0 <nil>
	// waiting: gpu-1
}
