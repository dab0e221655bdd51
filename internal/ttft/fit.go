package ttft

// The learned line. One engine's time to first token is fitted online as
//
//	ttft = overhead + work / rate
//
// where work is the prefill tokens ahead of the request plus its own
// prompt, by exponentially weighted least squares: every sample's weight
// decays by 1 − 1/window per later sample, so the fit follows an engine
// whose speed changes, over about window samples. Until minFitSamples
// real samples have arrived the line is the prior, through the origin
// with the seed rate (engine metrics, or DefaultRate); a prior mixed
// into the sums would pull the slope with its own leverage long after
// the engine showed otherwise.
//
// Guards: the slope is used only when the samples' work is spread (a
// coefficient of variation of at least minSpread) and the fit has a
// non-negative overhead (a fit that does not rise with work is flat at
// the mean); otherwise the line goes through the origin
// (rate = Σwork²/Σwork·ttft). Once warm, a sample more than
// outlierFactor times off the line (a GC pause, a stalled connection) is
// clipped to that bound before it is added, so one outlier moves the
// line a bounded step and a real change still moves it, over more
// samples.

import "math"

const (
	// minFitSamples is the fewest samples a line is fitted from.
	minFitSamples = 3
	// minSpread is the least coefficient of variation of the work for the
	// slope and overhead to be fitted separately.
	minSpread = 0.1
	// outlierFactor bounds a sample against the line once warm.
	outlierFactor = 4
	// outlierSlack is the absolute slack of that bound, seconds.
	outlierSlack = 0.05
	// maxRate bounds the learned rate, tokens per second.
	maxRate = 1e8
)

// fit is the weighted sums of one engine's samples. Not safe for
// concurrent use; the Estimator's mutex guards it.
type fit struct {
	alpha                 float64 // 1/window
	prior                 float64 // the seed rate, tokens per second
	w, sx, sy, sxx, sxy   float64 // weighted sums over (work, ttft) samples
	mad                   float64 // weighted mean |ttft − line| of the samples, seconds
	samples               int     // real samples added
	slope, intercept, rat float64 // the line, refreshed by refresh; rat = 1/slope
}

// newFit returns a fit seeded with rate (tokens per second).
func newFit(rate float64, window int) *fit {
	f := &fit{alpha: 1 / float64(max(window, 2))}
	f.seed(rate)
	return f
}

// seed replaces the prior with rate, keeping no real sample.
func (f *fit) seed(rate float64) {
	f.prior = min(max(rate, 1), maxRate)
	f.w, f.sx, f.sy, f.sxx, f.sxy, f.mad, f.samples = 0, 0, 0, 0, 0, 0, 0
	f.refresh()
}

func (f *fit) addWeighted(x, y, w float64) {
	f.w += w
	f.sx += w * x
	f.sy += w * y
	f.sxx += w * x * x
	f.sxy += w * x * y
}

// predict is the line at work x, seconds.
func (f *fit) predict(x float64) float64 { return f.intercept + f.slope*x }

// add learns one observation: work x tokens took y seconds to the first
// token.
func (f *fit) add(x, y float64) {
	if !(x >= 0) || !(y > 0) || math.IsInf(x, 0) || math.IsInf(y, 0) {
		return
	}
	p := f.predict(x)
	if f.samples >= warmSamples {
		y = min(max(y, p/outlierFactor), p*outlierFactor+outlierSlack)
	}
	k := 1 - f.alpha
	f.w, f.sx, f.sy, f.sxx, f.sxy = k*f.w, k*f.sx, k*f.sy, k*f.sxx, k*f.sxy
	f.addWeighted(x, y, 1)
	if f.samples == 0 {
		f.mad = math.Abs(y - p)
	} else {
		f.mad = k*f.mad + f.alpha*math.Abs(y-p)
	}
	f.samples++
	f.refresh()
}

// refresh recomputes the line from the sums.
func (f *fit) refresh() {
	if f.samples < minFitSamples {
		f.set(1/f.prior, 0)
		return
	}
	mx, my := f.sx/f.w, f.sy/f.w
	vx := f.sxx/f.w - mx*mx
	cov := f.sxy/f.w - mx*my
	if vx > (minSpread*mx)*(minSpread*mx) {
		slope := cov / vx
		if slope <= 0 {
			// More work ahead did not take longer (an engine that
			// prefills in parallel): the overhead is the mean.
			f.set(0, max(my, 0))
			return
		}
		if icpt := my - slope*mx; icpt >= 0 {
			f.set(slope, icpt)
			return
		}
	}
	if f.sxx > 0 && f.sxy > 0 {
		f.set(f.sxy/f.sxx, 0)
		return
	}
	f.set(0, max(my, 0))
}

func (f *fit) set(slope, icpt float64) {
	f.slope = max(slope, 1/maxRate)
	f.intercept = icpt
	f.rat = 1 / f.slope
}
