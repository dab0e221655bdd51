package openai

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/leasehold/leasehold/internal/estimate"
)

// The usage chunk read without reflection: every streamed answer the
// router forwards ends with one (it asks for it), and decoding it with
// encoding/json into a struct was most of what Inspect cost. decodeChunk
// reads the common form, each name spelled exactly and once, numbers as
// integers, and gives up (ok false) on anything else, which Inspect then
// hands to encoding/json: its answers are encoding/json's either way
// (FuzzDecodeChunk).

// chunk is a streamed chunk as Inspect reads it: how many choices, and its
// usage (nil if none or null).
type chunk struct {
	choices int
	usage   *Usage
}

// decodeChunk decodes data (valid JSON) as json.Unmarshal into
// struct{Choices []json.RawMessage; Usage *Usage} does, where the form is
// simple; ok is false where it is not (the caller decodes with
// encoding/json then).
func decodeChunk(data []byte) (c chunk, ok bool) {
	var seenChoices, seenUsage bool
	ok = true
	isObject := Object(data, func(name string, v []byte) {
		if !ok {
			return
		}
		switch {
		case name == "choices" && !seenChoices:
			seenChoices = true
			switch {
			case string(v) == "null":
			case v[0] == '[':
				Array(v, func([]byte) { c.choices++ })
			default:
				ok = false
			}
		case name == "usage" && !seenUsage:
			seenUsage = true
			switch {
			case string(v) == "null":
			case v[0] == '{':
				c.usage, ok = decodeUsage(v)
			default:
				ok = false
			}
		case unusual(name, "choices", "usage"):
			ok = false // another spelling, or repeated: encoding/json's rules
		}
	})
	return c, ok && isObject
}

// decodeUsage decodes the usage object v (valid JSON) in its simple form.
func decodeUsage(v []byte) (u *Usage, ok bool) {
	u, ok = &Usage{}, true
	var seen [3]bool
	Object(v, func(name string, val []byte) {
		if !ok {
			return
		}
		switch {
		case name == "prompt_tokens" && !seen[0]:
			seen[0] = true
			u.PromptTokens, ok = integer(val)
		case name == "completion_tokens" && !seen[1]:
			seen[1] = true
			u.CompletionTokens, ok = integer(val)
		case name == "prompt_tokens_details" && !seen[2]:
			seen[2] = true
			switch {
			case string(val) == "null":
			case val[0] == '{':
				u.Details, ok = decodeDetails(val)
			default:
				ok = false
			}
		case unusual(name, "prompt_tokens", "completion_tokens", "prompt_tokens_details"):
			ok = false
		}
	})
	return u, ok
}

// decodeDetails decodes prompt_tokens_details v (valid JSON, an object) in
// its simple form.
func decodeDetails(v []byte) (d *estimate.PromptDetails, ok bool) {
	d, ok = &estimate.PromptDetails{}, true
	var seen [3]bool
	Object(v, func(name string, val []byte) {
		if !ok {
			return
		}
		for i, f := range [...]struct {
			name string
			p    **int64
		}{{"image_tokens", &d.ImageTokens}, {"audio_tokens", &d.AudioTokens}, {"video_tokens", &d.VideoTokens}} {
			switch {
			case name == f.name && !seen[i]:
				seen[i] = true
				if string(val) == "null" {
					return
				}
				n, isInt := integer(val)
				if !isInt {
					ok = false
					return
				}
				*f.p = &n
				return
			case unusual(name, f.name):
				ok = false
				return
			}
		}
	})
	return d, ok
}

// unusual reports a member name encoding/json might match to one of
// fields otherwise than by its exact spelling: case-insensitively, or by
// its rules for non-ASCII letters.
func unusual(name string, fields ...string) bool {
	for i := 0; i < len(name); i++ {
		if name[i] >= utf8.RuneSelf {
			return true
		}
	}
	for _, f := range fields {
		if strings.EqualFold(name, f) {
			return true
		}
	}
	return false
}

// integer reads v (a valid JSON value) as an int64 the way encoding/json
// does for a number without a fraction or exponent; ok is false for
// anything else (another number form, which encoding/json refuses or
// rounds, null, another type).
func integer(v []byte) (int64, bool) {
	if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return 0, false
	}
	for _, b := range v[1:] {
		if b < '0' || b > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	return n, err == nil
}

// unmarshalChunk is decodeChunk by encoding/json, for every form.
func unmarshalChunk(data []byte) (chunk, bool) {
	var c struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   *Usage            `json:"usage"`
	}
	if json.Unmarshal(data, &c) != nil {
		return chunk{}, false
	}
	return chunk{choices: len(c.Choices), usage: c.Usage}, true
}
