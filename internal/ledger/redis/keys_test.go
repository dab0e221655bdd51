package redis

import (
	"strings"
	"testing"
)

func TestKeySchema(t *testing.T) {
	k, index := keySchema("lh", "llama-3-70b")
	want := map[string]string{
		"meta":       "lh:{llama-3-70b}:meta",
		"engines":    "lh:{llama-3-70b}:engines",
		"tenants":    "lh:{llama-3-70b}:tenants",
		"priorities": "lh:{llama-3-70b}:priorities",
		"deadlines":  "lh:{llama-3-70b}:deadlines",
		"holders":    "lh:{llama-3-70b}:holders",
		"req":        "lh:{llama-3-70b}:req",
		"counters":   "lh:{llama-3-70b}:counters",
		"engine:":    "lh:{llama-3-70b}:engine:",
		"tenant:":    "lh:{llama-3-70b}:tenant:",
		"lease:":     "lh:{llama-3-70b}:lease:",
		"holder:":    "lh:{llama-3-70b}:holder:",
	}
	got := k.scriptKeys()
	if len(got) != 12 {
		t.Fatalf("scriptKeys() has %d keys, want 12 (the KEYS layout of lib.lua)", len(got))
	}
	// The order is the KEYS layout in scripts/lua/lib.lua.
	order := []string{"meta", "engines", "tenants", "priorities", "deadlines", "holders", "req", "counters",
		"engine:", "tenant:", "lease:", "holder:"}
	for i, name := range order {
		if got[i] != want[name] {
			t.Errorf("KEYS[%d] (%s) = %q, want %q", i+1, name, got[i], want[name])
		}
		if tag := hashTag(got[i]); tag != "llama-3-70b" {
			t.Errorf("KEYS[%d] %q hash tag = %q, want the pool name", i+1, got[i], tag)
		}
	}
	if index != "lh:pools" {
		t.Errorf("pools index = %q, want lh:pools", index)
	}
}

// hashTag returns the part of key Redis Cluster hashes.
func hashTag(key string) string {
	s := strings.IndexByte(key, '{')
	if s < 0 {
		return key
	}
	e := strings.IndexByte(key[s+1:], '}')
	if e <= 0 {
		return key
	}
	return key[s+1 : s+1+e]
}

func TestCheckPrefix(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		ok     bool
	}{
		{"lh", true}, {"team-a.lh", true}, {"a:b", true},
		{"l{h", false}, {"l}h", false}, {"l*", false}, {"l?", false}, {"l[", false}, {"l h", false},
	} {
		if err := checkPrefix(tc.prefix); (err == nil) != tc.ok {
			t.Errorf("checkPrefix(%q) = %v, want ok=%v", tc.prefix, err, tc.ok)
		}
	}
}
