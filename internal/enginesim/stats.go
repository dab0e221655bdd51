package enginesim

import "time"

// counters only grow: /metrics reports them as they are, and Stats reports
// them less the copy taken at the last Reset.
type counters struct {
	accepted, completed, aborted, failed int64
	preemptions                          int64
	promptTokens, generationTokens       int64
	// finished counts sequences by finish reason.
	finishStop, finishLength, finishAbort int64
}

func (c *counters) finish(reason string) {
	switch reason {
	case finishStop:
		c.finishStop++
	case finishLength:
		c.finishLength++
	default:
		c.finishAbort++
	}
}

func (c counters) minus(b counters) counters {
	return counters{
		accepted: c.accepted - b.accepted, completed: c.completed - b.completed,
		aborted: c.aborted - b.aborted, failed: c.failed - b.failed,
		preemptions:  c.preemptions - b.preemptions,
		promptTokens: c.promptTokens - b.promptTokens, generationTokens: c.generationTokens - b.generationTokens,
		finishStop: c.finishStop - b.finishStop, finishLength: c.finishLength - b.finishLength,
		finishAbort: c.finishAbort - b.finishAbort,
	}
}

// stats is the ground truth the engine keeps, guarded by Engine.mu. Peaks,
// durations and the counters' baseline restart at Reset; the current state
// does not.
type stats struct {
	since time.Time
	// last is when the over-capacity clocks were last brought up to date.
	last time.Time

	counters
	base counters // counters at the last Reset

	peakBlocks       int
	peakHeld         int64
	peakRunning      int
	peakWaiting      int
	peakDemand       int64
	peakActual       int64
	peakAcceptedReqs int
	peakAcceptedSeqs int

	overKV, overSlots, overAny time.Duration
	// overActualKV: actual demand above capacity (not part of overAny,
	// which is about admitted demand).
	overActualKV time.Duration
}

// reset restarts counters and peaks at now; peaks start from the current
// state (set by the next observe).
func (s *stats) reset(now time.Time) {
	*s = stats{since: now, last: now, counters: s.counters, base: s.counters}
}

// integrate charges the time since the last call to the over-capacity
// clocks the engine's state was in. Call it before the admitted or actual
// demand changes: every locked operation that changes state (submit,
// stepLocked, abortLocked) calls it first, as do Stats and Reset.
func (s *stats) integrate(e *Engine, now time.Time) {
	dt := now.Sub(s.last)
	s.last = now
	if dt <= 0 {
		return
	}
	kv := e.demand > e.capacityTokens()
	slots := e.acceptedSeqs > e.cfg.Slots
	if kv {
		s.overKV += dt
	}
	if slots {
		s.overSlots += dt
	}
	if kv || slots {
		s.overAny += dt
	}
	if e.actual > e.capacityTokens() {
		s.overActualKV += dt
	}
}

// observe records the peaks of the engine's current state.
func (s *stats) observe(e *Engine) {
	s.peakBlocks = max(s.peakBlocks, e.numBlocks-e.free)
	s.peakHeld = max(s.peakHeld, e.held)
	s.peakRunning = max(s.peakRunning, len(e.running))
	s.peakWaiting = max(s.peakWaiting, len(e.waiting))
	s.peakDemand = max(s.peakDemand, e.demand)
	s.peakActual = max(s.peakActual, e.actual)
	s.peakAcceptedReqs = max(s.peakAcceptedReqs, e.acceptedReqs)
	s.peakAcceptedSeqs = max(s.peakAcceptedSeqs, e.acceptedSeqs)
}

// capacityTokens is the KV capacity in tokens: whole blocks only.
func (e *Engine) capacityTokens() int64 { return int64(e.numBlocks) * int64(e.cfg.BlockSize) }

// Stats is the engine's ground truth (GET /admin/stats). "Sequences" count
// each of a request's n outputs; "requests" count API requests. Peaks,
// counters and durations cover the time since Since (start or the last
// Reset); Current* and the capacity fields are the state now.
type Stats struct {
	Model     string    `json:"model"`
	Format    string    `json:"format"`
	Since     time.Time `json:"since"`
	Speed     float64   `json:"speed"`
	BlockSize int       `json:"block_size"`
	// Capacity: KV tokens in whole blocks, blocks, and sequence slots.
	KVCapacityTokens int64 `json:"kv_capacity_tokens"`
	KVCapacityBlocks int   `json:"kv_capacity_blocks"`
	Slots            int   `json:"slots"`
	MaxModelLen      int   `json:"max_model_len"`

	// True KV usage: blocks held by running sequences, the same in tokens
	// (blocks × block_size), and the tokens those blocks actually hold
	// (prompt + generated of each running sequence).
	KVBlocksUsed          int   `json:"kv_blocks_used"`
	KVBlockTokensUsed     int64 `json:"kv_block_tokens_used"`
	KVTokensUsed          int64 `json:"kv_tokens_used"`
	PeakKVBlocksUsed      int   `json:"peak_kv_blocks_used"`
	PeakKVBlockTokensUsed int64 `json:"peak_kv_block_tokens_used"`
	PeakKVTokensUsed      int64 `json:"peak_kv_tokens_used"`

	// Scheduler: running and waiting sequences.
	Running     int `json:"running"`
	Waiting     int `json:"waiting"`
	PeakRunning int `json:"peak_running"`
	PeakWaiting int `json:"peak_waiting"`

	// Admitted demand: accepted requests not yet finished (running or
	// waiting), and what they may hold: Σ (prompt_tokens + max_tokens) × n.
	// These are what a reservation system must keep within capacity.
	AcceptedRequests      int   `json:"accepted_requests"`
	AcceptedSequences     int   `json:"accepted_sequences"`
	AdmittedDemandTokens  int64 `json:"admitted_demand_tokens"`
	PeakAcceptedRequests  int   `json:"peak_accepted_requests"`
	PeakAcceptedSequences int   `json:"peak_accepted_sequences"`
	PeakAdmittedDemand    int64 `json:"peak_admitted_demand_tokens"`
	// Over-capacity time, wall clock: admitted demand above
	// KVCapacityTokens, accepted sequences above Slots, and either.
	// The _sim_ variants are the same times in simulated seconds (× Speed).
	OverKVCapacitySeconds    float64 `json:"over_kv_capacity_seconds"`
	OverSlotCapacitySeconds  float64 `json:"over_slot_capacity_seconds"`
	OverCapacitySeconds      float64 `json:"over_capacity_seconds"`
	OverCapacitySimSeconds   float64 `json:"over_capacity_sim_seconds"`
	OverKVCapacitySimSeconds float64 `json:"over_kv_capacity_sim_seconds"`

	// Actual demand: what accepted, unfinished sequences hold or would
	// hold if all ran, Σ (prompt_tokens + tokens generated so far) over
	// running and waiting sequences (a preempted sequence keeps what it
	// generated). It grows token by token and is what an elastic
	// reservation must keep within capacity; above it the engine queues or
	// preempts. Over-actual-capacity time is the time it spent above
	// KVCapacityTokens, wall clock and simulated.
	ActualDemandTokens             int64   `json:"actual_demand_tokens"`
	PeakActualDemand               int64   `json:"peak_actual_demand_tokens"`
	OverActualKVCapacitySeconds    float64 `json:"over_actual_kv_capacity_seconds"`
	OverActualKVCapacitySimSeconds float64 `json:"over_actual_kv_capacity_sim_seconds"`

	// Counters: requests accepted, completed, aborted by their client,
	// dropped by an injected failure; sequence preemptions; prompt tokens
	// (once per sequence) and generated tokens; sequences by finish reason.
	RequestsAccepted  int64            `json:"requests_accepted"`
	RequestsCompleted int64            `json:"requests_completed"`
	RequestsAborted   int64            `json:"requests_aborted"`
	RequestsFailed    int64            `json:"requests_failed"`
	Preemptions       int64            `json:"preemptions"`
	PromptTokens      int64            `json:"prompt_tokens"`
	GenerationTokens  int64            `json:"generation_tokens"`
	SequencesFinished map[string]int64 `json:"sequences_finished"`

	Fail FailState `json:"fail"`
}

// Stats returns the ground truth now.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.st.integrate(e, time.Now())
	bs := int64(e.cfg.BlockSize)
	used := e.numBlocks - e.free
	c := e.st.counters.minus(e.st.base)
	return Stats{
		Model:                          e.cfg.Model,
		Format:                         string(e.cfg.Format),
		Since:                          e.st.since,
		Speed:                          e.cfg.Speed,
		BlockSize:                      e.cfg.BlockSize,
		KVCapacityTokens:               e.capacityTokens(),
		KVCapacityBlocks:               e.numBlocks,
		Slots:                          e.cfg.Slots,
		MaxModelLen:                    e.cfg.MaxModelLen,
		KVBlocksUsed:                   used,
		KVBlockTokensUsed:              int64(used) * bs,
		KVTokensUsed:                   e.held,
		PeakKVBlocksUsed:               e.st.peakBlocks,
		PeakKVBlockTokensUsed:          int64(e.st.peakBlocks) * bs,
		PeakKVTokensUsed:               e.st.peakHeld,
		Running:                        len(e.running),
		Waiting:                        len(e.waiting),
		PeakRunning:                    e.st.peakRunning,
		PeakWaiting:                    e.st.peakWaiting,
		AcceptedRequests:               e.acceptedReqs,
		AcceptedSequences:              e.acceptedSeqs,
		AdmittedDemandTokens:           e.demand,
		PeakAcceptedRequests:           e.st.peakAcceptedReqs,
		PeakAcceptedSequences:          e.st.peakAcceptedSeqs,
		PeakAdmittedDemand:             e.st.peakDemand,
		OverKVCapacitySeconds:          e.st.overKV.Seconds(),
		OverSlotCapacitySeconds:        e.st.overSlots.Seconds(),
		OverCapacitySeconds:            e.st.overAny.Seconds(),
		OverCapacitySimSeconds:         e.st.overAny.Seconds() * e.cfg.Speed,
		OverKVCapacitySimSeconds:       e.st.overKV.Seconds() * e.cfg.Speed,
		ActualDemandTokens:             e.actual,
		PeakActualDemand:               e.st.peakActual,
		OverActualKVCapacitySeconds:    e.st.overActualKV.Seconds(),
		OverActualKVCapacitySimSeconds: e.st.overActualKV.Seconds() * e.cfg.Speed,
		RequestsAccepted:               c.accepted,
		RequestsCompleted:              c.completed,
		RequestsAborted:                c.aborted,
		RequestsFailed:                 c.failed,
		Preemptions:                    c.preemptions,
		PromptTokens:                   c.promptTokens,
		GenerationTokens:               c.generationTokens,
		SequencesFinished: map[string]int64{
			finishStop: c.finishStop, finishLength: c.finishLength, finishAbort: c.finishAbort,
		},
		Fail: e.fail,
	}
}

// Reset restarts the counters, peaks and over-capacity clocks (admitted
// and actual); peaks start again from the current state. Requests in
// flight are not touched.
func (e *Engine) Reset() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.st.reset(time.Now())
	e.st.observe(e)
}
