package enginesim

// Writing one accepted request's answer, whole or as server-sent events,
// paced by the simulation's progress.

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// response writes one accepted request's answer.
type response struct {
	e       *Engine
	r       *request
	chat    bool
	id      string
	model   string
	created int64
	// start is when the request reached the handler.
	start time.Time
}

// dropConnection cuts the client's connection without a final answer, as
// a crashed engine would.
func dropConnection() { panic(http.ErrAbortHandler) }

// wait blocks until r makes progress; false means the answer is over: the
// client went away (r is aborted) or the engine closed.
func (o *response) wait(ctx context.Context) bool {
	select {
	case <-o.r.notifyC:
		return true
	case <-ctx.Done():
		o.e.abort(o.r)
		return false
	case <-o.e.stopC:
		o.e.abort(o.r)
		return false
	}
}

func (o *response) text(seq, from, to int) string {
	var b strings.Builder
	for t := from; t < to; t++ {
		b.WriteString(tokenText(o.r.seqs[seq].key, t))
	}
	return b.String()
}

func (o *response) whole(ctx context.Context, w http.ResponseWriter) {
	select {
	case <-o.r.doneC:
	case <-ctx.Done():
		o.e.abort(o.r)
		return
	case <-o.e.stopC:
		o.e.abort(o.r)
		writeError(w, ErrClosed)
		return
	}
	prog, err := o.e.snapshot(o.r, nil)
	if err != nil {
		dropConnection()
	}
	choices := make([]map[string]any, len(prog))
	for i, p := range prog {
		c := map[string]any{"index": i, "finish_reason": p.finish, "logprobs": nil}
		if o.chat {
			c["message"] = map[string]any{"role": "assistant", "content": o.text(i, 0, p.generated)}
		} else {
			c["text"] = o.text(i, 0, p.generated)
		}
		choices[i] = c
	}
	object := "text_completion"
	if o.chat {
		object = "chat.completion"
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": o.id, "object": object, "created": o.created, "model": o.model,
		"choices": choices, "usage": usageOf(o.r, prog),
	})
}

// streamChoice is one choice of a stream chunk.
type streamChoice struct {
	Index        int            `json:"index"`
	Delta        map[string]any `json:"delta,omitempty"`
	Text         *string        `json:"text,omitempty"`
	Logprobs     any            `json:"logprobs"`
	FinishReason *string        `json:"finish_reason"`
}

type streamChunk struct {
	ID      string         `json:"id"`
	Object  string         `json:"object"`
	Created int64          `json:"created"`
	Model   string         `json:"model"`
	Choices []streamChoice `json:"choices"`
	Usage   *usage         `json:"usage,omitempty"`
	// Sim is the simulator's own extension, on the usage chunk only.
	Sim *simTiming `json:"x_enginesim,omitempty"`
}

// simTiming is how long the engine spent on a request: service_us runs
// from the request reaching the handler to the usage chunk, which goes out
// with [DONE] in the stream's last write. A client subtracts it from what
// it measured to see what lies outside the engine (the network, a hop),
// free of the engine's own step-to-step variance.
type simTiming struct {
	ServiceMicros int64 `json:"service_us"`
}

// stream writes the answer as server-sent events: per choice, a role chunk
// (chat), one chunk per token, the finish reason on the last; then a usage
// chunk with no choices when asked for, then [DONE].
func (o *response) stream(ctx context.Context, w http.ResponseWriter, includeUsage bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	object := "text_completion"
	if o.chat {
		object = "chat.completion.chunk"
	}
	var buf bytes.Buffer
	emit := func(c streamChunk) {
		c.ID, c.Object, c.Created, c.Model = o.id, object, o.created, o.model
		if c.Choices == nil {
			c.Choices = []streamChoice{}
		}
		b, _ := json.Marshal(c)
		buf.WriteString("data: ")
		buf.Write(b)
		buf.WriteString("\n\n")
	}
	flush := func() bool {
		_, err := w.Write(buf.Bytes())
		buf.Reset()
		if err == nil {
			err = rc.Flush()
		}
		if err != nil {
			o.e.abort(o.r)
			return false
		}
		return true
	}
	n := len(o.r.seqs)
	if o.chat {
		for i := range n {
			emit(streamChunk{Choices: []streamChoice{{Index: i, Delta: map[string]any{"role": "assistant", "content": ""}}}})
		}
	}
	if !flush() {
		return
	}
	sent := make([]int, n)
	done := make([]bool, n)
	var prog []progress
	for left := n; left > 0; {
		if !o.wait(ctx) {
			return
		}
		var err error
		if prog, err = o.e.snapshot(o.r, prog); err != nil {
			dropConnection()
		}
		for i, p := range prog {
			for t := sent[i]; t < p.generated; t++ {
				tok := tokenText(o.r.seqs[i].key, t)
				ch := streamChoice{Index: i}
				if o.chat {
					ch.Delta = map[string]any{"content": tok}
				} else {
					ch.Text = &tok
				}
				if t == p.generated-1 && p.finish != "" {
					ch.FinishReason = &p.finish
					done[i] = true
					left--
				}
				emit(streamChunk{Choices: []streamChoice{ch}})
			}
			sent[i] = p.generated
			if p.finish != "" && !done[i] { // ended without a new token
				done[i] = true
				left--
				ch := streamChoice{Index: i, FinishReason: &p.finish}
				if o.chat {
					ch.Delta = map[string]any{}
				} else {
					empty := ""
					ch.Text = &empty
				}
				emit(streamChunk{Choices: []streamChoice{ch}})
			}
		}
		if !flush() {
			return
		}
	}
	if includeUsage {
		u := usageOf(o.r, prog)
		emit(streamChunk{Usage: &u, Sim: &simTiming{ServiceMicros: time.Since(o.start).Microseconds()}})
	}
	buf.WriteString("data: [DONE]\n\n")
	flush()
}
