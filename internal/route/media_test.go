package route

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/estimate"
	"github.com/leasehold/leasehold/internal/fleet"
	"github.com/leasehold/leasehold/internal/ledger"
)

// chatWith is a chat body whose one user message has the text "describe
// these" and the given content parts after it.
func chatWith(parts ...string) string {
	return `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":[{"type":"text","text":"describe these"}` +
		func() string {
			var b strings.Builder
			for _, p := range parts {
				b.WriteString("," + p)
			}
			return b.String()
		}() + `]}]}`
}

const (
	imagePart = `{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}}`
	audioPart = `{"type":"input_audio","input_audio":{"data":"UklGRg==","format":"wav"}}`
	videoPart = `{"type":"video_url","video_url":{"url":"https://example.com/a.mp4"}}`
)

func parseChat(t *testing.T, body string) *request {
	t.Helper()
	lim := limits{maxModelLen: func(ledger.PoolID) int64 { return 4096 }, maxN: 8}
	r, err := parseRequest([]byte(body), true, lim, 64)
	if err != nil {
		t.Fatalf("parse %s: %v", body, err)
	}
	return r
}

// TestMediaPartsCounted: images, audio and video parts are counted by
// kind, their payloads are not weighed as text, and each is reserved at
// the pool's media_tokens on top of the text.
func TestMediaPartsCounted(t *testing.T) {
	text := parseChat(t, chatWith())
	r := parseChat(t, chatWith(imagePart, imagePart, audioPart, videoPart))
	if r.media != (estimate.Counts{2, 1, 1}) {
		t.Fatalf("media %v, want 2 images, 1 audio, 1 video", r.media)
	}
	if r.promptBytes != text.promptBytes {
		t.Errorf("prompt bytes %d with media, %d without: media payloads must not count as text", r.promptBytes, text.promptBytes)
	}
	e := estimate.NewEstimator(2, fleet.MediaTokens{Image: 1000, Audio: 300, Video: 5000})
	if got, want := e.PromptTokens(r.prompt())-e.PromptTokens(text.prompt()), int64(2*1000+300+5000); got != want {
		t.Errorf("media add %d tokens to the estimate, want %d", got, want)
	}
	// Counted by /tokenize, the text is exact; the media still add theirs.
	r.promptTokens = 40
	if got := e.PromptTokens(r.prompt()); got != 40+2*1000+300+5000 {
		t.Errorf("tokenized prompt with media: %d, want 40 + the media", got)
	}
}

// TestMediaPartErrors: an unknown content part type is refused naming the
// part, before any lease, rather than leased as nothing; a kind the pool
// sets to 0 is refused naming the setting.
func TestMediaPartErrors(t *testing.T) {
	lim := limits{maxModelLen: func(ledger.PoolID) int64 { return 4096 }, maxN: 8}
	_, err := parseRequest([]byte(chatWith(imagePart, `{"type":"file","file":{"file_id":"f"}}`)), true, lim, 64)
	br, ok := err.(*badRequest)
	if !ok || br.param != "messages[0].content[2].type" || !strings.Contains(br.msg, `"file"`) {
		t.Fatalf("unknown part type: %v, want a 400 naming messages[0].content[2].type", err)
	}
	m := estimate.NewMedia(fleet.MediaTokens{Image: 1000})
	err = checkMedia(m, "m", parseChat(t, chatWith(audioPart)).media)
	if br, ok := err.(*badRequest); !ok || !strings.Contains(br.msg, "media_tokens.audio is 0") {
		t.Fatalf("audio on a pool without audio: %v", err)
	}
	if err := checkMedia(m, "m", parseChat(t, chatWith(imagePart)).media); err != nil {
		t.Fatalf("image on a pool with images: %v", err)
	}
}

func detailsOf(image, audio *int64) *estimate.PromptDetails {
	return &estimate.PromptDetails{ImageTokens: image, AudioTokens: audio}
}

func ptr(v int64) *int64 { return &v }

// TestMediaLearnsFromUsage: the reservation per item is the pool's floor,
// raised to the most an engine reported per item: exactly from
// prompt_tokens_details, else from what the text did not take. Requests
// with media never move the text ratio, except by their reported text.
func TestMediaLearnsFromUsage(t *testing.T) {
	e := estimate.NewEstimator(2, fleet.MediaTokens{Image: 1000, Audio: 300, Video: 5000})
	text := parseChat(t, chatWith())
	for range 20 {
		e.ObserveUsage(text.prompt(), 12, nil)
	}
	ratio := e.Ratio()
	two := parseChat(t, chatWith(imagePart, imagePart))

	// Less than the floor per item: the floor stays.
	e.ObserveUsage(two.prompt(), 12+2*600, detailsOf(ptr(1200), nil))
	if got := e.Media().PerItem(estimate.Image); got != 1000 {
		t.Errorf("after 600 per image: %d per image, want the floor 1000", got)
	}
	// More: exactly, from the details.
	e.ObserveUsage(two.prompt(), 12+2*2500, detailsOf(ptr(5000), nil))
	if got := e.Media().PerItem(estimate.Image); got != 2500 {
		t.Errorf("after 2500 per image (details): %d, want 2500", got)
	}
	// Without details, the residual over the text's share.
	audio := parseChat(t, chatWith(audioPart))
	e.ObserveUsage(audio.prompt(), e.TextTokens(audio.prompt())+750, nil)
	if got := e.Media().PerItem(estimate.Audio); got != 750 {
		t.Errorf("after 750 per audio clip (no details): %d, want 750", got)
	}
	// Two kinds unreported: nothing to learn, and no text calibration.
	mixed := parseChat(t, chatWith(audioPart, videoPart))
	e.ObserveUsage(mixed.prompt(), 99999, nil)
	if got := e.Media().PerItem(estimate.Video); got != 5000 {
		t.Errorf("mixed kinds without details moved video to %d", got)
	}
	if got := e.Ratio(); got != ratio {
		t.Errorf("text ratio moved from %v to %v by requests with media", ratio, got)
	}
	// The largest report stays for estimate.MediaWindow items, then ages out.
	for range estimate.MediaWindow {
		e.ObserveUsage(two.prompt(), 12+2*1500, detailsOf(ptr(3000), nil))
	}
	if got := e.Media().PerItem(estimate.Image); got != 1500 {
		t.Errorf("after %d reports of 1500: %d per image, want 1500", estimate.MediaWindow, got)
	}
}

// TestMediaRequestsStayWithinCapacity: an engine that expands each image
// into 1,500 prompt tokens, 12 clients sending image requests at once.
// With the pool's default reservation per image the ledger queues them
// and the engine's own ground truth never exceeds its KV capacity; with
// images reserved at 1 token each (what the router leased before it sized
// media) the same load overfills the engine, and the router learns the
// true size from the engine's prompt_tokens_details.
func TestMediaRequestsStayWithinCapacity(t *testing.T) {
	body := map[string]any{"model": "m", "max_tokens": 16, "messages": []any{map[string]any{"role": "user", "content": []any{
		map[string]any{"type": "text", "text": "what is in this picture?"},
		map[string]any{"type": "image_url", "image_url": map[string]any{"url": "data:image/png;base64,iVBORw0KGgo="}},
	}}}}
	run := func(t *testing.T, pool string) (*harness, enginesimStats) {
		h := newHarness(t, harnessOpts{engines: 1, kv: 8192, slots: 64, speed: 2, output: 16, media: 1500, pool: pool, extra: tenants,
			cfg: func(c *Config) { c.QueueQuota = true }})
		var wg sync.WaitGroup
		for c := range 12 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range 2 {
					status, _, b, err := post(context.Background(), h.client, h.url+"/v1/chat/completions", "sk-acme", body)
					if err != nil || status != 200 {
						t.Errorf("client %d: %d %s %v", c, status, b, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		h.waitNoLeases(5 * time.Second)
		s := h.engines[0].Stats()
		return h, enginesimStats{capacity: s.KVCapacityTokens, peak: s.PeakAdmittedDemand}
	}
	t.Run("sized", func(t *testing.T) {
		h, s := run(t, "")
		t.Logf("images reserved at the default: peak admitted demand %d of %d KV tokens", s.peak, s.capacity)
		if s.peak > s.capacity {
			t.Errorf("peak admitted demand %d > KV capacity %d", s.peak, s.capacity)
		}
		if got := h.r.pools["m"].est.Media().PerItem(estimate.Image); got != fleet.DefaultMediaTokens.Image {
			t.Errorf("reserved %d per image, want the default %d (the engine's 1,500 is below it)", got, fleet.DefaultMediaTokens.Image)
		}
	})
	t.Run("unsized", func(t *testing.T) {
		h, s := run(t, "    media_tokens: {image: 1}\n")
		t.Logf("images reserved at 1 token: peak admitted demand %d of %d KV tokens", s.peak, s.capacity)
		if s.peak <= s.capacity {
			t.Errorf("images leased at 1 token: peak admitted demand %d within capacity %d; the test no longer loads the engine past it", s.peak, s.capacity)
		}
		if got := h.r.pools["m"].est.Media().PerItem(estimate.Image); got != 1500 {
			t.Errorf("after the engine reported 1,500 per image: %d reserved per image, want 1500", got)
		}
	})
}

type enginesimStats struct{ capacity, peak int64 }
