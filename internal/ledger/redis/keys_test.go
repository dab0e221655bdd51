package redis

import (
	"strings"
	"testing"
)

func TestKeySchema(t *testing.T) {
	k, index := keySchema("lh", "llama-3-70b")
	want := map[string]string{
		"state":     "lh:{llama-3-70b}:state",
		"engines":   "lh:{llama-3-70b}:engines",
		"tenants":   "lh:{llama-3-70b}:tenants",
		"deadlines": "lh:{llama-3-70b}:deadlines",
		"holders":   "lh:{llama-3-70b}:holders",
		"req":       "lh:{llama-3-70b}:req",
		"leases":    "lh:{llama-3-70b}:leases",
		"holder:":   "lh:{llama-3-70b}:holder:",
	}
	got := k.scriptKeys()
	if len(got) != len(want) {
		t.Fatalf("scriptKeys() has %d keys, want %d (the KEYS layout of lib.lua)", len(got), len(want))
	}
	// The order is the KEYS layout in scripts/lua/lib.lua.
	order := []string{"state", "engines", "tenants", "deadlines", "holders", "req", "leases", "holder:"}
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
