package openai

import (
	"encoding/json"
	"io"
	"maps"
	"reflect"
	"strings"
	"testing"
)

// FuzzDecode: on valid JSON, Text, Number, Bool and Decode answer what
// encoding/json's Unmarshal does.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`"plain"`, `"esc\"aped\n"`, `"\u00e9t\u00e9"`, "\"bad \xff utf8\"", `""`, `12`, `-0.5e3`, `1e400`,
		`3.0`, `true`, `false`, `null`, `[1]`, `{"a":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return
		}
		var ws string
		werr := json.Unmarshal(raw, &ws)
		isString := werr == nil && string(raw) != "null" // Unmarshal leaves a string alone on null; Text refuses it
		if s, ok := Text(raw); ok != isString || (ok && s != ws) {
			t.Errorf("Text(%s) = %q, %v; encoding/json %q, %v", raw, s, ok, ws, werr)
		}
		var ds string
		if err := Decode(raw, &ds); (err == nil) != (werr == nil) || ds != ws {
			t.Errorf("Decode(%s) into a string = %q, %v; encoding/json %q, %v", raw, ds, err, ws, werr)
		}
		var wf float64
		ferr := json.Unmarshal(raw, &wf)
		if string(raw) == "null" {
			ferr = io.EOF // Unmarshal leaves a float alone on null; Number refuses it
		}
		if v, ok := Number(raw); ok != (ferr == nil) || (ok && v != wf) {
			t.Errorf("Number(%s) = %v, %v; encoding/json %v, %v", raw, v, ok, wf, ferr)
		}
		var wb bool
		berr := json.Unmarshal(raw, &wb)
		var db bool
		if err := Decode(raw, &db); (err == nil) != (berr == nil) || db != wb {
			t.Errorf("Decode(%s) into a bool = %v, %v; encoding/json %v, %v", raw, db, err, wb, berr)
		}
	})
}

// members counts an object's members with encoding/json's tokenizer.
func members(body []byte) int {
	dec := json.NewDecoder(strings.NewReader(string(body)))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return -1
	}
	n := 0
	for dec.More() {
		if _, err := dec.Token(); err != nil { // the name
			return -2
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return -2
		}
		n++
	}
	return n
}

// FuzzMembers: Members counts what encoding/json's tokenizer counts, and
// AppendObject writes an object that decodes to the fields given, each
// named once.
func FuzzMembers(f *testing.F) {
	for _, s := range []string{`{}`, ` { "a" : 1 , "b":[1,{"c":":"}] } `, `{"a":1,"a":2}`, `{"q\"uo:te":"x:y","d":{"e":{}}}`,
		`{"<&>":"\u2028","é":1}`, `[1,2]`, `"s"`, `{"a":"\\","b":"\\\""}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !json.Valid(body) {
			return
		}
		want := members(body)
		if want < -1 {
			return
		}
		if got := Members(body); got != want {
			t.Fatalf("Members(%s) = %d, want %d", body, got, want)
		}
		var fields map[string]json.RawMessage
		if want < 0 || json.Unmarshal(body, &fields) != nil {
			return
		}
		out := AppendObject(nil, fields, map[string]json.RawMessage{"drop": nil, "add": json.RawMessage(`{"x":true}`)})
		var got map[string]json.RawMessage
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("AppendObject wrote %s: %v", out, err)
		}
		wantFields := maps.Clone(fields)
		delete(wantFields, "drop")
		wantFields["add"] = json.RawMessage(`{"x":true}`)
		if Members(out) != len(got) || !reflect.DeepEqual(compactAll(got), compactAll(wantFields)) {
			t.Fatalf("AppendObject(%s) = %s, want the fields %v", body, out, wantFields)
		}
	})
}

func compactAll(m map[string]json.RawMessage) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		var b strings.Builder
		var x any
		_ = json.Unmarshal(v, &x)
		enc, _ := json.Marshal(x)
		b.Write(enc)
		out[k] = b.String()
	}
	return out
}
