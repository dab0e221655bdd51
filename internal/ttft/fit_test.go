package ttft

import (
	"math"
	"math/rand/v2"
	"testing"
)

// engineModel is a synthetic engine: ttft = overhead + work/rate (rate 0:
// flat at overhead), with ±noise relative jitter.
type engineModel struct {
	overhead, rate, noise float64
}

func (m engineModel) ttft(rng *rand.Rand, work float64) float64 {
	y := m.overhead
	if m.rate > 0 {
		y += work / m.rate
	}
	return y * (1 + m.noise*(2*rng.Float64()-1))
}

func (m engineModel) exact(work float64) float64 {
	if m.rate == 0 {
		return m.overhead
	}
	return m.overhead + work/m.rate
}

// From the default prior, the fit converges on synthetic engines: a slower
// one with a fixed overhead, a faster one, one whose time does not grow
// with the work (it prefills in parallel, like enginesim), and one whose
// requests are all the same size (no spread: the line goes through the
// origin and still predicts that size).
func TestFitConverges(t *testing.T) {
	for _, tc := range []struct {
		name   string
		model  engineModel
		work   func(*rand.Rand) float64
		probes []float64
		tol    float64 // relative error allowed at the probes
	}{
		{"slow with overhead", engineModel{overhead: 0.03, rate: 4000, noise: 0.1},
			func(r *rand.Rand) float64 { return 200 + 6000*r.Float64() }, []float64{500, 2000, 6000}, 0.1},
		{"fast", engineModel{overhead: 0.01, rate: 40000, noise: 0.1},
			func(r *rand.Rand) float64 { return 100 + 20000*r.Float64() }, []float64{1000, 10000, 20000}, 0.1},
		{"parallel prefill", engineModel{overhead: 0.12, noise: 0.1},
			func(r *rand.Rand) float64 { return 1000 + 30000*r.Float64() }, []float64{1000, 30000}, 0.1},
		{"one prompt size", engineModel{overhead: 0.02, rate: 5000, noise: 0.05},
			func(*rand.Rand) float64 { return 1500 }, []float64{1500}, 0.06},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			f := newFit(DefaultRate, DefaultWindow)
			for range 400 {
				w := tc.work(rng)
				f.add(w, tc.model.ttft(rng, w))
			}
			for _, x := range tc.probes {
				got, want := f.predict(x), tc.model.exact(x)
				if rel := math.Abs(got-want) / want; rel > tc.tol {
					t.Errorf("predict(%v) = %.4fs, want %.4fs ±%v (relative error %.3f)", x, got, want, tc.tol, rel)
				}
			}
		})
	}
}

// One wild sample (a stalled connection) moves a warm line a bounded step;
// a real, lasting slowdown is still learned.
func TestFitOutliersAndChange(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	m := engineModel{overhead: 0.02, rate: 8000, noise: 0.05}
	f := newFit(DefaultRate, DefaultWindow)
	for range 200 {
		w := 500 + 4000*rng.Float64()
		f.add(w, m.ttft(rng, w))
	}
	before := f.predict(2000)
	f.add(2000, 100) // 100 s: an outlier
	after := f.predict(2000)
	if after > before*1.15 {
		t.Errorf("one 100 s sample moved predict(2000) from %.3fs to %.3fs, want under +15%%", before, after)
	}
	slow := engineModel{overhead: 0.02, rate: 2000, noise: 0.05}
	for range 300 {
		w := 500 + 4000*rng.Float64()
		f.add(w, slow.ttft(rng, w))
	}
	if got, want := f.predict(2000), slow.exact(2000); math.Abs(got-want)/want > 0.1 {
		t.Errorf("after the engine slowed 4x, predict(2000) = %.3fs, want %.3fs ±10%%", got, want)
	}
}

// Samples that cannot be times are ignored.
func TestFitIgnoresNonsense(t *testing.T) {
	f := newFit(DefaultRate, DefaultWindow)
	want := f.predict(1000)
	for _, s := range [][2]float64{{1000, 0}, {1000, -1}, {-5, 0.1}, {1000, math.NaN()}, {math.Inf(1), 1}, {1000, math.Inf(1)}} {
		f.add(s[0], s[1])
	}
	if got := f.predict(1000); got != want || f.samples != 0 {
		t.Errorf("after nonsense samples predict(1000) = %v with %d samples, want %v and 0", got, f.samples, want)
	}
	if got := want; math.Abs(got-1000.0/DefaultRate) > 1e-9 {
		t.Errorf("prior predict(1000) = %v, want %v (DefaultRate)", got, 1000.0/DefaultRate)
	}
}
