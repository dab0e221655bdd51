package openai

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"unicode/utf8"
)

// A request body's values as the router reads them, without a decoder
// where the JSON is simple: the request path reads a handful of scalars
// from every body, and encoding/json's Unmarshal costs allocations per
// call. Every function here takes raw JSON that a json.Decoder has
// already checked, and falls back to encoding/json whenever the value is
// not of the simple form, so the results are encoding/json's.

// Text decodes raw as a JSON string: ok is false when it is not one. A
// string without escapes is sliced rather than decoded; one with escapes
// or invalid UTF-8 (which encoding/json replaces) is decoded by
// encoding/json.
func Text(raw json.RawMessage) (s string, ok bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	in := raw[1 : len(raw)-1]
	if bytes.IndexByte(in, '\\') < 0 && utf8.Valid(in) {
		return string(in), true
	}
	return s, json.Unmarshal(raw, &s) == nil
}

// Number decodes raw as a JSON number into a float64, as encoding/json
// does (an out-of-range number is refused): ok is false when it is not a
// number.
func Number(raw json.RawMessage) (float64, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || (raw[0] != '-' && (raw[0] < '0' || raw[0] > '9')) {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	return f, err == nil
}

// Bool decodes raw as a JSON boolean: ok is false when it is not one.
func Bool(raw json.RawMessage) (v, ok bool) {
	switch string(bytes.TrimSpace(raw)) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// Decode decodes raw into v as json.Unmarshal does, strings and booleans
// without a decoder.
func Decode(raw json.RawMessage, v any) error {
	switch p := v.(type) {
	case *string:
		if s, ok := Text(raw); ok {
			*p = s
			return nil
		}
	case *bool:
		if b, ok := Bool(raw); ok {
			*p = b
			return nil
		}
	}
	return json.Unmarshal(raw, v)
}

// Members counts the members of the JSON object body, duplicate names
// included, or -1 when body is not an object. body must be valid JSON (a
// decoder accepted it): the scan only tracks strings and nesting.
func Members(body []byte) int {
	body = bytes.TrimSpace(body)
	if len(body) < 2 || body[0] != '{' {
		return -1
	}
	n, depth, inString, escaped := 0, 0, false, false
	for _, c := range body {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			depth--
		case c == ':' && depth == 1:
			n++
		}
	}
	return n
}

// AppendObject appends fields as a JSON object, names in sorted order
// (encoding/json's order for a map), each value as it is (raw JSON);
// replace's values stand in for the fields' of the same name, and a nil
// one leaves that field out.
func AppendObject(dst []byte, fields, replace map[string]json.RawMessage) []byte {
	names := make([]string, 0, len(fields)+len(replace))
	for k := range fields {
		names = append(names, k)
	}
	for k := range replace {
		if _, ok := fields[k]; !ok {
			names = append(names, k)
		}
	}
	slices.Sort(names)
	dst = append(dst, '{')
	first := true
	for _, k := range names {
		v, ok := replace[k]
		if !ok {
			v = fields[k]
		}
		if v == nil {
			continue
		}
		if !first {
			dst = append(dst, ',')
		}
		first = false
		dst = appendName(dst, k)
		dst = append(dst, ':')
		dst = append(dst, v...)
	}
	return append(dst, '}')
}

// appendName appends s as a JSON string: quoted as it is when it needs no
// escape, else as encoding/json writes it.
func appendName(dst []byte, s string) []byte {
	for i := range len(s) {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' || c >= utf8.RuneSelf {
			b, _ := json.Marshal(s) // a string always encodes
			return append(dst, b...)
		}
	}
	return append(append(append(dst, '"'), s...), '"')
}

// StreamOptions reads a request's stream_options (valid JSON, not null)
// as json.Unmarshal into struct{IncludeUsage *bool `json:"include_usage"`}
// does: includeUsage is whether it is true; ok is false where Unmarshal
// fails. The common form (include_usage spelled exactly, once) is read by
// a walk; any other goes to encoding/json (FuzzStreamOptions).
func StreamOptions(raw []byte) (includeUsage, ok bool) {
	fast, seen := true, false
	isObject := Object(raw, func(name string, v []byte) {
		switch {
		case !fast:
		case name == "include_usage" && !seen:
			seen = true
			if string(v) != "null" {
				includeUsage, fast = Bool(v)
			}
		case unusual(name, "include_usage"):
			fast = false
		}
	})
	if isObject && fast {
		return includeUsage, true
	}
	var so struct {
		IncludeUsage *bool `json:"include_usage"`
	}
	if json.Unmarshal(raw, &so) != nil {
		return false, false
	}
	return so.IncludeUsage != nil && *so.IncludeUsage, true
}
