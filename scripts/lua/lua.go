// Package lua holds the Redis scripts of the redis ledger backend, one per
// ledger operation, embedded so the binary carries them.
//
// Each operation's file starts with a comment listing its KEYS, ARGV and
// reply shape. lib.lua holds what every script shares (key layout, sweep,
// lease bookkeeping) and lib_admit.lua the admission rule's helpers; Source
// prepends them, so every script is one self-contained EVAL body. Defining a
// Lua function costs every call of the script that carries it, so only the
// scripts that admit or grow carry lib_admit.lua, and only those that charge
// or true up tenants' rate windows lib_rate.lua.
package lua

import (
	"embed"
	"fmt"
)

//go:embed *.lua
var files embed.FS

// Operations lists the scripts Source serves.
var Operations = []string{
	"configure", "drain", "keepalive", "acquire", "renew", "resize", "grow",
	"release", "reassert", "observe", "sweep", "stats", "list", "totals",
}

// admits lists the operations that carry lib_admit.lua (keepalive for its
// count of recovered engines).
var admits = map[string]bool{"acquire": true, "resize": true, "grow": true, "keepalive": true}

// rates lists the operations that carry lib_rate.lua.
var rates = map[string]bool{"acquire": true, "release": true}

// Source returns the script for op: lib.lua, lib_admit.lua if op admits or
// grows, lib_rate.lua if it charges or trues up rate windows, then op.lua.
func Source(op string) (string, error) {
	parts := []string{"lib.lua"}
	if admits[op] {
		parts = append(parts, "lib_admit.lua")
	}
	if rates[op] {
		parts = append(parts, "lib_rate.lua")
	}
	var src []byte
	for _, name := range append(parts, op+".lua") {
		b, err := files.ReadFile(name)
		if err != nil {
			return "", fmt.Errorf("script %s: read %s: %w", op, name, err)
		}
		src = append(append(src, b...), '\n')
	}
	return string(src), nil
}
