package openai

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzDecodeChunk: where decodeChunk answers, it answers what
// encoding/json does.
func FuzzDecodeChunk(f *testing.F) {
	for _, s := range []string{
		`{"id":"c","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":8,"total_tokens":20,"x_enginesim":{"service_us":1500}}}`,
		`{"choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}`,
		`{"choices":[{"index":0}],"usage":{"prompt_tokens":3,"completion_tokens":1,"prompt_tokens_details":{"image_tokens":576,"audio_tokens":null}}}`,
		`{"usage":{"prompt_tokens":1.5}}`, `{"usage":{"prompt_tokens":1e3}}`, `{"usage":{"prompt_tokens":"7"}}`,
		`{"usage":{"prompt_tokens":99999999999999999999}}`, `{"Usage":{"prompt_tokens":1}}`, `{"usage":{"Prompt_Tokens":1}}`,
		`{"usage":{"prompt_tokens":1},"usage":{"completion_tokens":2}}`, `{"choices":[1],"choices":null}`,
		`{"choices":"x"}`, `{"usage":[]}`, `[]`, `{"ch\u006fices":[1]}`, `{"uſage":{"prompt_tokens":1}}`,
		`{"usage":{"prompt_tokens_details":{"Image_tokens":1}}}`, `{"usage":{"prompt_tokens":-0,"completion_tokens":null}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) {
			return
		}
		got, ok := decodeChunk(data)
		if !ok {
			return
		}
		want, wantOK := unmarshalChunk(data)
		if !wantOK {
			t.Fatalf("decodeChunk(%s) = %+v, encoding/json refuses it", data, got)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decodeChunk(%s) = %+v (usage %+v), encoding/json: %+v (usage %+v)", data, got, got.usage, want, want.usage)
		}
	})
}

// TestDecodeChunkCommon: the chunks an engine sends take the fast path.
func TestDecodeChunkCommon(t *testing.T) {
	for _, tc := range []struct {
		name string
		data string
	}{
		{"usage chunk", `{"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":8,"total_tokens":20}}`},
		{"token chunk", `{"id":"c","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}],"usage":null}`},
		{"details", `{"choices":[],"usage":{"prompt_tokens":600,"completion_tokens":1,"prompt_tokens_details":{"image_tokens":576}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := decodeChunk([]byte(tc.data))
			if !ok {
				t.Fatalf("decodeChunk(%s) gave up; want the fast path", tc.data)
			}
			want, _ := unmarshalChunk([]byte(tc.data))
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("decodeChunk(%s) = %+v, want %+v", tc.data, got, want)
			}
		})
	}
}

// FuzzStreamOptions: StreamOptions answers what encoding/json does.
func FuzzStreamOptions(f *testing.F) {
	for _, s := range []string{`{"include_usage":true}`, `{"include_usage":false}`, `{"include_usage":null}`, `{}`,
		`{"include_usage":1}`, `{"Include_Usage":true}`, `{"include_usage":true,"include_usage":false}`, `[]`, `"x"`,
		`{"include_usage":true,"other":[1,{"a":2}]}`, `{"include_usage":true,"include_usage":null}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if !json.Valid(data) || string(data) == "null" {
			return
		}
		var so struct {
			IncludeUsage *bool `json:"include_usage"`
		}
		wantOK := json.Unmarshal(data, &so) == nil
		want := wantOK && so.IncludeUsage != nil && *so.IncludeUsage
		got, ok := StreamOptions(data)
		if ok != wantOK || got != want {
			t.Fatalf("StreamOptions(%s) = %v, %v; encoding/json: %v, %v", data, got, ok, want, wantOK)
		}
	})
}
