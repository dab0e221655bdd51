// Package lua holds the Redis scripts of the redis ledger backend, one per
// ledger operation, embedded so the binary carries them.
//
// Each operation's file starts with a comment listing its KEYS, ARGV and
// reply shape. lib.lua holds what the scripts share (key layout, sweep,
// lease bookkeeping, the admission rule); Source prepends it, so every
// script is one self-contained EVAL body.
package lua

import (
	"embed"
	"fmt"
)

//go:embed *.lua
var files embed.FS

// Operations lists the scripts Source serves.
var Operations = []string{
	"configure", "drain", "keepalive", "acquire", "renew", "resize",
	"release", "reassert", "observe", "sweep", "stats", "list",
}

// Source returns the script for op: lib.lua followed by op.lua.
func Source(op string) (string, error) {
	lib, err := files.ReadFile("lib.lua")
	if err != nil {
		return "", fmt.Errorf("read lib.lua: %w", err)
	}
	body, err := files.ReadFile(op + ".lua")
	if err != nil {
		return "", fmt.Errorf("read script %s: %w", op, err)
	}
	return string(lib) + "\n" + string(body), nil
}
