package openai

import (
	"bytes"
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// A walk over JSON the router has checked (json.Valid), without
// reflection: a request's top-level fields and its chat messages are read
// on every request, and encoding/json's decoding into maps and structs
// was most of that cost. Each function answers what encoding/json answers
// for the same input (FuzzObject, FuzzMessages).

// Object calls f with each member of the JSON object data, in order: its
// name, decoded, and its value, raw (a subslice of data). data must be
// valid JSON; ok is false when it is not an object.
func Object(data []byte, f func(name string, value []byte)) (ok bool) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	i = skipSpace(data, i+1)
	if data[i] == '}' {
		return true
	}
	for {
		end := skipString(data, i)
		name := decodeName(data[i:end])
		i = skipSpace(data, end)
		i = skipSpace(data, i+1) // the ':'
		vend := skipValue(data, i)
		f(name, data[i:vend])
		i = skipSpace(data, vend)
		if data[i] == '}' {
			return true
		}
		i = skipSpace(data, i+1) // the ','
	}
}

// Fields is the JSON object body's members by name (a repeated name's
// last value, as json.Unmarshal into a map keeps), each value a subslice
// of body, and how many members it has, repeated names counted each time;
// ok is false unless body is valid JSON and an object.
func Fields(body []byte) (fields map[string]json.RawMessage, members int, ok bool) {
	if !json.Valid(body) {
		return nil, 0, false
	}
	fields = make(map[string]json.RawMessage, 8)
	ok = Object(body, func(name string, v []byte) {
		fields[name] = v
		members++
	})
	if !ok {
		return nil, 0, false
	}
	return fields, members, true
}

// Array calls f with each element of the JSON array data, raw. data must
// be valid JSON; ok is false when it is not an array.
func Array(data []byte, f func(elem []byte)) (ok bool) {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '[' {
		return false
	}
	i = skipSpace(data, i+1)
	if data[i] == ']' {
		return true
	}
	for {
		end := skipValue(data, i)
		f(data[i:end])
		i = skipSpace(data, end)
		if data[i] == ']' {
			return true
		}
		i = skipSpace(data, i+1)
	}
}

// Message is a chat message as the router sizes it.
type Message struct {
	Role      *string         `json:"role"`
	Content   json.RawMessage `json:"content"`
	Name      string          `json:"name"`
	ToolCalls json.RawMessage `json:"tool_calls"`
}

// Messages decodes the JSON array raw (valid JSON) into messages as
// json.Unmarshal into a []Message does: names matched case-insensitively,
// the last of a repeated name winning, a null element a zero Message, a
// null name leaving the name as it was. ok is false where Unmarshal fails:
// raw is not an array (nor null), an element is not an object (nor null),
// role or name is not a string (nor null).
func Messages(raw []byte) (msgs []Message, ok bool) {
	if raw = bytes.TrimSpace(raw); string(raw) == "null" {
		return nil, true
	}
	ok = true
	isArray := Array(raw, func(elem []byte) {
		var m Message
		if !ok {
			return
		}
		switch {
		case string(elem) == "null":
		case elem[0] != '{':
			ok = false
		default:
			Object(elem, func(name string, v []byte) {
				switch {
				case ok && strings.EqualFold(name, "role"):
					if string(v) == "null" {
						m.Role = nil
					} else if s, isStr := Text(v); isStr {
						m.Role = &s
					} else {
						ok = false
					}
				case strings.EqualFold(name, "content"):
					m.Content = rawValue(v)
				case ok && strings.EqualFold(name, "name"):
					if s, isStr := Text(v); isStr {
						m.Name = s
					} else if string(v) != "null" {
						ok = false
					}
				case strings.EqualFold(name, "tool_calls"):
					m.ToolCalls = rawValue(v)
				}
			})
		}
		msgs = append(msgs, m)
	})
	if !isArray || !ok {
		return nil, false
	}
	if msgs == nil {
		msgs = []Message{}
	}
	return msgs, true
}

// rawValue is v as a json.RawMessage field decodes it: null as "null".
func rawValue(v []byte) json.RawMessage { return json.RawMessage(v) }

// decodeName decodes a JSON string (with its quotes) that names a member.
// A name of the API's (knownNames) is returned without a copy: a request
// and each chunk of an answer name a dozen members.
func decodeName(s []byte) string {
	in := s[1 : len(s)-1]
	if name, ok := knownNames[string(in)]; ok {
		return name
	}
	if bytes.IndexByte(in, '\\') < 0 && utf8.Valid(in) {
		return string(in)
	}
	var name string
	_ = json.Unmarshal(s, &name) // valid JSON: a string always decodes
	return name
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at data[i].
func skipString(data []byte, i int) int {
	for i++; i < len(data); i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// skipValue returns the index after the value starting at data[i].
func skipValue(data []byte, i int) int {
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for ; i < len(data); i++ {
			switch data[i] {
			case '"':
				i = skipString(data, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return i
	}
	for ; i < len(data); i++ {
		switch data[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
	}
	return i
}

// knownNames are the member names requests and answers use most, each
// mapped to itself.
var knownNames = func() map[string]string {
	m := map[string]string{}
	for _, n := range []string{"model", "messages", "role", "content", "name", "tool_calls", "tools", "stream",
		"stream_options", "include_usage", "max_tokens", "max_completion_tokens", "n", "best_of", "priority", "prompt",
		"temperature", "top_p", "stop", "seed", "user", "id", "object", "created", "choices", "index", "delta",
		"finish_reason", "logprobs", "usage", "prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details",
		"type", "text", "image_url", "url"} {
		m[n] = n
	}
	return m
}()
