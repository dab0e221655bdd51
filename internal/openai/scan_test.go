package openai

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzObject: on valid JSON, Object and Array see the members and elements
// encoding/json sees (a map keeps the last of a repeated name).
func FuzzObject(f *testing.F) {
	for _, s := range []string{`{}`, ` { "a" : 1 , "b":[1,{"c":":"}], "a":"x\"}" } `, `{"q\"uo:te":"x:y","d":{"e":{}}}`,
		`{"\u00e9":null,"é":true,"e\\":[]}`, `[1, "a", {"b": [2]}, null, -1.5e3]`, `[]`, `"s"`, `7`, "{\"k\":\"\xff\"}"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		var want map[string]json.RawMessage
		wantObj := json.Unmarshal(data, &want) == nil
		got := map[string]json.RawMessage{}
		if ok := Object(data, func(name string, v []byte) { got[name] = v }); ok != wantObj {
			t.Fatalf("Object(%s) = %v, encoding/json decodes an object: %v", data, ok, wantObj)
		}
		if wantObj && !reflect.DeepEqual(compactAll(got), compactAll(want)) {
			t.Fatalf("Object(%s) = %v, want %v", data, got, want)
		}
		var wantArr []json.RawMessage
		isArr := json.Unmarshal(data, &wantArr) == nil && wantArr != nil
		var gotArr []json.RawMessage
		if ok := Array(data, func(e []byte) { gotArr = append(gotArr, e) }); ok != isArr {
			t.Fatalf("Array(%s) = %v, encoding/json decodes an array: %v", data, ok, isArr)
		}
		if isArr && len(gotArr) != len(wantArr) {
			t.Fatalf("Array(%s) has %d elements, want %d", data, len(gotArr), len(wantArr))
		}
		for i := range gotArr {
			if !reflect.DeepEqual(compactAll(map[string]json.RawMessage{"": gotArr[i]}), compactAll(map[string]json.RawMessage{"": wantArr[i]})) {
				t.Fatalf("Array(%s)[%d] = %s, want %s", data, i, gotArr[i], wantArr[i])
			}
		}
	})
}

// FuzzMessages: on valid JSON, Messages decodes what json.Unmarshal into a
// []Message decodes, and fails where it fails.
func FuzzMessages(f *testing.F) {
	for _, s := range []string{
		`[{"role":"user","content":"hi"}]`, `[{"ROLE":"a","Content":[{"type":"text"}],"name":"n","tool_calls":[{"x":1}]}]`,
		`[null, {"role":null}, {"role":"a","role":null}, {"name":"a","name":null}]`, `[{"role":1}]`, `[{"name":{}}]`, `[1]`, `["x"]`,
		`null`, `[]`, `{}`, `[{"content":null,"tool_calls":null}]`, `[{"rolE":"\u00e9"}]`, `[{"ro\u006ce":"x"}]`, "[{\"role\":\"\xff\"}]",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		var want []Message
		werr := json.Unmarshal(raw, &want)
		got, ok := Messages(raw)
		if ok != (werr == nil) {
			t.Fatalf("Messages(%s) ok = %v; encoding/json: %v", raw, ok, werr)
		}
		if !ok {
			return
		}
		if len(got) != len(want) || (got == nil) != (want == nil) {
			t.Fatalf("Messages(%s) = %d messages (nil %v), want %d (nil %v)", raw, len(got), got == nil, len(want), want == nil)
		}
		for i := range got {
			g, w := got[i], want[i]
			if (g.Role == nil) != (w.Role == nil) || (g.Role != nil && *g.Role != *w.Role) || g.Name != w.Name ||
				!sameRaw(g.Content, w.Content) || !sameRaw(g.ToolCalls, w.ToolCalls) {
				t.Fatalf("Messages(%s)[%d] = %+v, want %+v", raw, i, g, w)
			}
		}
	})
}

// sameRaw: both absent or null, or the same JSON.
func sameRaw(a, b json.RawMessage) bool {
	null := func(r json.RawMessage) bool { return len(r) == 0 || string(r) == "null" }
	if null(a) || null(b) {
		return null(a) == null(b)
	}
	return reflect.DeepEqual(compactAll(map[string]json.RawMessage{"": a}), compactAll(map[string]json.RawMessage{"": b}))
}
