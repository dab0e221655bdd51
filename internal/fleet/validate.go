package fleet

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/telemetry"
)

// maxDuration bounds every configured duration, as the ledger bounds TTLs.
const maxDuration = 24 * time.Hour

// Validate checks a Fleet and returns every problem, each a *FieldError
// naming the field path and the allowed values (errors.Is ErrInvalid).
// Parse has already run it; call it again after changing a Fleet in code.
func (f *Fleet) Validate() error { return errors.Join(f.check()...) }

// checker collects field errors.
type checker struct{ errs []error }

func (c *checker) add(path, format string, args ...any) {
	c.errs = append(c.errs, &FieldError{Path: path, Message: fmt.Sprintf(format, args...)})
}

// name checks an identifier by the ledger's rules.
func (c *checker) name(path, v string) {
	switch {
	case v == "":
		c.add(path, "is required")
	case len(v) > ledger.MaxIDLen:
		c.add(path, "is %d bytes, must be at most %d", len(v), ledger.MaxIDLen)
	default:
		for i := 0; i < len(v); i++ {
			if b := v[i]; b < 0x21 || b == 0x7f {
				c.add(path, "%q must not contain spaces or control characters", v)
				return
			}
		}
	}
}

// fraction checks v in (0, 1], or [0, 1] when zero is allowed.
func (c *checker) fraction(path string, v float64, allowZero bool) {
	ok := v > 0 && v <= 1
	if allowZero {
		ok = v >= 0 && v <= 1
	}
	if ok && !math.IsNaN(v) {
		return
	}
	if allowZero {
		c.add(path, "must be in [0, 1], got %v", v)
	} else {
		c.add(path, "must be in (0, 1], got %v", v)
	}
}

func (c *checker) duration(path string, d, lo time.Duration) {
	if d < lo || d > maxDuration {
		c.add(path, "must be in %s..%s, got %s", lo, maxDuration, d)
	}
}

// maxBreakerCount bounds a breaker's failures, probes and successes.
const maxBreakerCount = 1 << 20

// breaker checks a pool's breaker, defaults filled in.
func (c *checker) breaker(path string, b ledger.BreakerSpec) {
	if b.Failures == 0 || b.Failures < -1 || b.Failures > maxBreakerCount {
		c.add(path+".failures", "must be in 1..%d (consecutive failed dispatches that open an engine's breaker), or -1 to turn the breaker off, got %d", maxBreakerCount, b.Failures)
	}
	c.duration(path+".cooldown", b.Cooldown, time.Millisecond)
	if b.Probes < 1 || b.Probes > maxBreakerCount {
		c.add(path+".probes", "must be in 1..%d (probe requests a half-open engine takes at a time, fleet-wide), got %d", maxBreakerCount, b.Probes)
	}
	if b.Successes < 1 || b.Successes > maxBreakerCount {
		c.add(path+".successes", "must be in 1..%d (successful probes that close an engine's breaker), got %d", maxBreakerCount, b.Successes)
	}
}

func (c *checker) httpURL(path, v string) {
	if v == "" {
		c.add(path, "is required (an http:// or https:// URL)")
		return
	}
	u, err := url.Parse(v)
	if err != nil {
		c.add(path, "is not a URL: %v", err)
		return
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		c.add(path, "must be an http:// or https:// URL with a host, got %q", u.Redacted())
	}
}

// engineKey is what identifies the engine behind an engine URL: scheme,
// host (lower-cased) and port (the scheme's default when none is given),
// and the path without a trailing slash; "" when v is not a URL (the URL
// check reports it).
func engineKey(v string) string {
	u, err := url.Parse(v)
	if err != nil || u.Host == "" {
		return ""
	}
	scheme, port := strings.ToLower(u.Scheme), u.Port()
	switch {
	case port != "":
	case scheme == "http":
		port = "80"
	case scheme == "https":
		port = "443"
	}
	return scheme + "://" + strings.ToLower(u.Hostname()) + ":" + port + strings.TrimRight(u.Path, "/")
}

// unique checks the name at list[i].field: a valid name, and not the name
// of an earlier element (seen maps each name to its first index).
func unique[N ~string](c *checker, seen map[N]int, list string, i int, field string, name N) {
	path := fmt.Sprintf("%s[%d].%s", list, i, field)
	c.name(path, string(name))
	if j, dup := seen[name]; dup && name != "" {
		c.add(path, "%q is already the %s of %s[%d]", name, field, list, j)
	} else {
		seen[name] = i
	}
}

// check returns every problem with f.
func (f *Fleet) check() []error {
	c := &checker{}
	if len(f.Pools) == 0 {
		c.add("pools", "must list at least one pool")
	}
	pools := map[ledger.PoolID]int{}
	engineAt := map[string]string{} // engineKey → the first engine's path
	for i, p := range f.Pools {
		pp := fmt.Sprintf("pools[%d]", i)
		unique(c, pools, "pools", i, "name", p.Name)
		c.duration(pp+".retry_after", p.RetryAfter, 0)
		c.duration(pp+".first_byte_timeout", p.FirstByteTimeout, 0)
		switch p.Reserve {
		case ledger.ReserveElastic:
			if !(p.GrowthHeadroom >= 0 && p.GrowthHeadroom <= ledger.MaxGrowthHeadroom) {
				c.add(pp+".growth_headroom", "must be in [0, %v], got %v (the share of each engine's KV capacity kept free for growth)", ledger.MaxGrowthHeadroom, p.GrowthHeadroom)
			}
		case ledger.ReserveWorstCase:
			if p.GrowthHeadroom != 0 {
				c.add(pp+".growth_headroom", "must be 0 or omitted with reserve: worst_case (its leases hold every output token up front), got %v", p.GrowthHeadroom)
			}
		default:
			c.add(pp+".reserve", "must be elastic or worst_case, got %q", p.Reserve)
		}
		if p.MaxModelLen != 0 && (p.MaxModelLen < MinMaxModelLen || p.MaxModelLen > ledger.MaxAmount) {
			c.add(pp+".max_model_len", "%s", maxModelLenMsg(p.MaxModelLen))
		}
		c.breaker(pp+".breaker", p.Breaker)
		for _, m := range p.MediaTokens.kinds() {
			if m.tokens < 0 || m.tokens > ledger.MaxAmount {
				c.add(pp+".media_tokens."+m.kind, "must be in 0..%d, got %d (KV tokens per %s; 0 refuses requests with one)", ledger.MaxAmount, m.tokens, m.kind)
			}
		}
		if len(p.Engines) == 0 {
			c.add(pp+".engines", "must list at least one engine")
		}
		ids := map[ledger.EngineID]int{}
		for j, e := range p.Engines {
			ep := fmt.Sprintf("%s.engines[%d]", pp, j)
			unique(c, ids, pp+".engines", j, "id", e.ID)
			c.engine(ep, e)
			if k := engineKey(e.URL); k != "" {
				if other, dup := engineAt[k]; dup {
					c.add(ep+".url", "%q is the engine of %s already: one engine under two ids or in two pools is admitted against twice over", e.URL, other)
				} else {
					engineAt[k] = ep
				}
			}
		}
	}

	keys := map[KeyHash]string{}
	tenants := map[ledger.TenantID]int{}
	for i, t := range f.Tenants {
		tp := fmt.Sprintf("tenants[%d]", i)
		unique(c, tenants, "tenants", i, "name", t.Name)
		if len(t.APIKeys) == 0 {
			c.add(tp+".api_keys", "must list at least one key (plaintext or \"sha256:<hex>\")")
		}
		for j, k := range t.APIKeys {
			kp := fmt.Sprintf("%s.api_keys[%d]", tp, j)
			if other, dup := keys[k]; dup {
				c.add(kp, "is the same key as %s; a key must identify one tenant", other)
			} else {
				keys[k] = kp
			}
		}
		c.fraction(tp+".kv_share", t.KVShare, false)
		c.fraction(tp+".slot_share", t.SlotShare, true)
		c.budget(tp+".tokens_per_minute", t.TokensPerMinute, "tokens")
		c.budget(tp+".requests_per_minute", t.RequestsPerMinute, "requests")
		seen := map[ledger.PoolID]bool{}
		for j, p := range t.Pools {
			pp := fmt.Sprintf("%s.pools[%d]", tp, j)
			if _, ok := pools[p]; !ok {
				c.add(pp, "%q is not a pool in this file", p)
			}
			if seen[p] {
				c.add(pp, "%q is listed twice", p)
			}
			seen[p] = true
		}
	}

	prios := map[ledger.PriorityName]int{}
	if len(f.Priorities) == 0 {
		c.add("priorities", "must not be empty (omit it for the implicit %q class)", DefaultPriority)
	}
	for i, p := range f.Priorities {
		pp := fmt.Sprintf("priorities[%d]", i)
		unique(c, prios, "priorities", i, "name", p.Name)
		c.fraction(pp+".max_fill", p.MaxFill, false)
		if slo, ok := f.TTFTSLOs[p.Name]; ok && (slo < MinTTFTSLO || slo > maxDuration) {
			c.add(pp+".ttft_slo", "must be in %s..%s, got %s (the time to first token routers admit the class against; omit it for none)", MinTTFTSLO, maxDuration, slo)
		}
	}
	for name := range f.TTFTSLOs {
		if _, ok := prios[name]; !ok {
			c.add("priorities", "a ttft_slo is set for %q, which is not a listed priority", name)
		}
	}
	if _, ok := prios[f.DefaultPriority]; !ok && len(f.Priorities) > 0 {
		var names []string
		for _, p := range f.Priorities {
			names = append(names, string(p.Name))
		}
		c.add("default_priority", "%q is not a listed priority (want one of %q)", f.DefaultPriority, names)
	}

	l := f.Lease
	c.duration("lease.session_ttl", l.SessionTTL, MinSessionTTL)
	c.duration("lease.renew_interval", l.RenewInterval, time.Millisecond)
	c.duration("lease.lease_ttl", l.LeaseTTL, time.Second)
	if l.RenewInterval >= l.SessionTTL {
		c.add("lease.renew_interval", "must be less than lease.session_ttl (%s), got %s", l.SessionTTL, l.RenewInterval)
	}
	if l.RenewInterval >= l.LeaseTTL {
		c.add("lease.renew_interval", "must be less than lease.lease_ttl (%s), got %s", l.LeaseTTL, l.RenewInterval)
	}
	if l.OrphanHold < 0 || l.OrphanHold > maxDuration {
		c.add("lease.orphan_hold", "must be in 0s..%s, got %s", maxDuration, l.OrphanHold)
	}
	if l.RecoveryWindow != 0 && (l.RecoveryWindow < l.SessionTTL || l.RecoveryWindow > maxDuration) {
		c.add("lease.recovery_window", "must be 0s (disabled) or in lease.session_ttl (%s)..%s so every live holder can re-assert, got %s", l.SessionTTL, maxDuration, l.RecoveryWindow)
	}
	f.checkTenancy(c)
	return c.errs
}

// budget checks a tenant's rate budget: 0 (none) or 1..ledger.MaxAmount.
func (c *checker) budget(path string, v int64, what string) {
	if v < 0 || v > ledger.MaxAmount {
		c.add(path, "must be in 0..%d, got %d (%s per minute in each pool, shared by every router; 0 or omitted for none)", ledger.MaxAmount, v, what)
	}
}

// maxModelLenMsg says what pools[].max_model_len allows; v is what the file
// gave.
func maxModelLenMsg(v int64) string {
	return fmt.Sprintf("must be in %d..%d, got %d (the engines' context length in tokens; omit it to discover it from the engines)",
		MinMaxModelLen, ledger.MaxAmount, v)
}

func (c *checker) engine(ep string, e Engine) {
	c.httpURL(ep+".url", e.URL)
	if e.StaleAfter != 0 {
		c.httpURL(ep+".metrics_url", e.MetricsURL)
	}
	if _, err := telemetry.ParseFormat(string(e.Format)); err != nil || e.Format == "" {
		c.add(ep+".format", "must be vllm, sglang or tgi, got %q", e.Format)
	}
	switch {
	case e.KVFromMetrics && e.KVTokens != 0:
		c.add(ep+".kv_tokens", "is %d, but the engine is marked to discover capacity from metrics", e.KVTokens)
	case e.KVFromMetrics:
		c.fraction(ep+".headroom", e.Headroom, false)
		if e.StaleAfter == 0 {
			c.add(ep+".stale_after", "is 0s (no telemetry), but kv_tokens is omitted and must be discovered from metrics")
		}
	case e.KVTokens < 1 || e.KVTokens > ledger.MaxAmount:
		c.add(ep+".kv_tokens", "must be > 0 and at most %d, got %d (omit it to discover capacity from metrics)", ledger.MaxAmount, e.KVTokens)
	}
	if !e.KVFromMetrics && e.Headroom != 0 {
		c.add(ep+".headroom", "applies only to capacity discovered from metrics; omit it, or omit kv_tokens")
	}
	if e.Slots < 1 || e.Slots > ledger.MaxAmount {
		c.add(ep+".slots", "must be > 0 and at most %d, got %d", ledger.MaxAmount, e.Slots)
	}
	c.duration(ep+".stale_after", e.StaleAfter, 0)
	switch e.StalePolicy {
	case ledger.StaleHold, ledger.StaleBlock, ledger.StaleIgnore:
	default:
		c.add(ep+".stale_policy", "must be hold, block or ignore, got %q", e.StalePolicy)
	}
}
