package route

import (
	"context"
	"errors"

	"github.com/leasehold/leasehold/internal/estimate"
	"github.com/leasehold/leasehold/internal/ledger"
)

// countPrompt makes req's prompt count exact (--prompt-tokens=tokenize)
// from one of views, the pool's candidates, and calibrates p's estimator
// with it. On failure req keeps its estimate, and the failure is counted
// unless the client went away. No-op for token-id prompts and in
// estimate mode.
func (r *Router) countPrompt(ctx context.Context, p *poolRT, req *request, views []engineView, requestID string) {
	if r.cfg.PromptTokens != PromptTokenize || req.promptTokens > 0 || len(views) == 0 {
		return
	}
	ids := make([]ledger.EngineID, len(views))
	for i, v := range views {
		ids[i] = v.id
	}
	engine, ok := p.tok.Pick(ids, req.chat, r.clock.Now())
	if !ok {
		r.met.tokenize.WithLabelValues(string(req.model), estimate.ReasonUnsupported).Inc()
		return
	}
	n, err := estimate.Tokenize{Client: r.client, Timeout: r.cfg.TokenizeTimeout, BaseURL: p.urls[engine],
		Fields: req.fields, Chat: req.chat, RequestID: requestID}.Count(ctx)
	if ctx.Err() != nil {
		return // the client is gone: acquire reports it
	}
	if p.tok.Mark(engine, err == nil, r.clock.Now()) {
		r.log.Warn("tokenize failed; leasing prompt estimates, and passing this engine over for a while", "pool", req.model, "engine", engine, "err", err, "for", estimate.TokenizeCooldown)
	}
	if err != nil {
		reason := estimate.ReasonBadResponse
		var te *estimate.TokenizeError
		if errors.As(err, &te) {
			reason = te.Reason
		}
		r.met.tokenize.WithLabelValues(string(req.model), reason).Inc()
		r.log.Debug("tokenize failed; leasing the prompt estimate", "pool", req.model, "engine", engine, "err", err)
		return
	}
	p.est.ObserveTokenized(req.prompt(), n)
	req.promptTokens = n
}
