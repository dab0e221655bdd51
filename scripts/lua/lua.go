// Package lua holds the Redis scripts of the redis ledger backend, one per
// ledger operation, embedded so the binary carries them.
//
// Each operation's file starts with a comment listing its KEYS, ARGV and
// reply shape. lib.lua holds what every script shares (key layout, sweep,
// lease bookkeeping), lib_admit.lua the admission rule's helpers and
// lib_rate.lua tenants' rate windows. Source assembles one self-contained
// EVAL body per operation from them: Lua runs a script's whole chunk on
// every call, so each local a script defines (a function's closure, a
// constant) costs every call of it, used or not. Source therefore keeps
// only the top-level definitions of the lib files that op.lua uses,
// directly or through other kept definitions, writes number constants as
// literals, and defines each lib function only when a call first reaches
// it (lazy): a script refers to lib function f as LIB.f.
package lua

import (
	"embed"
	"fmt"
	"regexp"
	"strings"
)

//go:embed *.lua
var files embed.FS

// Operations lists the scripts Source serves.
var Operations = []string{
	"configure", "drain", "keepalive", "acquire", "renew", "resize", "grow",
	"release", "reassert", "observe", "sweep", "stats", "list", "totals",
}

// libs lists the shared files in the order their definitions may use one
// another's.
var libs = []string{"lib.lua", "lib_admit.lua", "lib_rate.lua"}

// Source returns the script for op: the definitions of the lib files that
// op.lua needs, in file order, then op.lua.
func Source(op string) (string, error) {
	body, err := files.ReadFile(op + ".lua")
	if err != nil {
		return "", fmt.Errorf("script %s: read %s.lua: %w", op, op, err)
	}
	var defs []def
	for _, name := range libs {
		b, err := files.ReadFile(name)
		if err != nil {
			return "", fmt.Errorf("script %s: read %s: %w", op, name, err)
		}
		defs = append(defs, split(string(b))...)
	}
	// Walk the definitions backwards: a definition can use only those
	// before it, so one pass from the script up finds every one it needs.
	need := names(string(body))
	keep := make([]bool, len(defs))
	for i := len(defs) - 1; i >= 0; i-- {
		for _, n := range defs[i].defines {
			if need[n] {
				keep[i] = true
			}
		}
		if keep[i] {
			for n := range names(defs[i].text) {
				need[n] = true
			}
		}
	}
	// A constant is a local like any other, and each function that uses
	// it captures it as an upvalue when the chunk runs: its literal costs
	// nothing. A function is defined only when the call first reaches it
	// (see lazy).
	rename := map[string]string{}
	var head strings.Builder
	var funcs []def
	for i, d := range defs {
		if !keep[i] {
			continue
		}
		if c := constants(d); c != nil {
			for n, v := range c {
				rename[n] = v
			}
			continue
		}
		if localFunc.MatchString(code(d.text)) {
			funcs = append(funcs, d)
			rename[d.defines[0]] = "LIB." + d.defines[0]
			continue
		}
		head.WriteString(d.text)
	}
	for n := range names(head.String()) {
		if strings.HasPrefix(rename[n], "LIB.") {
			return "", fmt.Errorf("script %s: a top-level value uses function %s, which lua.go defines lazily", op, n)
		}
	}
	var src strings.Builder
	src.WriteString(head.String())
	src.WriteString(lazy(funcs))
	src.Write(body)
	src.WriteByte('\n')
	return inline(src.String(), rename), nil
}

// lazy returns the table LIB that defines each of funcs on first use: a
// function defined at the top of a script costs a closure, and a search
// for each upvalue it captures, on every call, whether the call reaches it
// or not. Calls use LIB.name (Source renames them); the first one runs the
// __index branch that defines name in LIB, the later ones find it there.
func lazy(funcs []def) string {
	var b strings.Builder
	b.WriteString("local LIB = {}\nsetmetatable(LIB, {__index = function(_, k)\n")
	for i, d := range funcs {
		if i == 0 {
			b.WriteString("  if")
		} else {
			b.WriteString("  elseif")
		}
		name := d.defines[0]
		fmt.Fprintf(&b, " k == '%s' then\n", name)
		b.WriteString(strings.Replace(code(d.text), "local function "+name+"(", "function LIB."+name+"(", 1))
	}
	if len(funcs) > 0 {
		b.WriteString("  end\n")
	}
	b.WriteString("  return rawget(LIB, k)\nend})\n")
	return b.String()
}

// code is a definition's text without the comment lines above it.
func code(text string) string {
	for strings.HasPrefix(text, "--") {
		_, text, _ = strings.Cut(text, "\n")
	}
	return text
}

// def is one top-level definition of a lib file: a "local" statement at
// the start of a line with the comment lines just above it, up to the next
// such definition.
type def struct {
	defines []string // the names it declares
	first   int      // its first line in the file
	text    string
}

var (
	localFunc = regexp.MustCompile(`^local function ([A-Za-z_][A-Za-z0-9_]*)`)
	localVars = regexp.MustCompile(`^local ([A-Za-z_][A-Za-z0-9_, ]*?)\s*(=|$)`)
)

// split cuts a lib file into its definitions; text before the first one
// (the file's header comment) defines nothing and is dropped.
func split(src string) []def {
	lines := strings.SplitAfter(src, "\n")
	var out []def
	start := -1 // first line of the current definition's comment
	cur := -1   // index in out of the definition being read
	for i, line := range lines {
		if strings.HasPrefix(line, "--") {
			if start < 0 {
				start = i
			}
			continue
		}
		var defines []string
		if m := localFunc.FindStringSubmatch(line); m != nil {
			defines = []string{m[1]}
		} else if m := localVars.FindStringSubmatch(line); m != nil {
			for _, n := range strings.Split(m[1], ",") {
				defines = append(defines, strings.TrimSpace(n))
			}
		}
		if defines != nil {
			from := i
			if start >= 0 {
				from = start
			}
			if cur >= 0 {
				out[cur].text = strings.Join(lines[out[cur].first:from], "")
			}
			out = append(out, def{defines: defines})
			cur = len(out) - 1
			out[cur].first = from
		}
		start = -1
	}
	if cur >= 0 {
		out[cur].text = strings.Join(lines[out[cur].first:], "")
	}
	return out
}

// names returns the identifiers Lua code refers to: every name outside
// comments and string literals, except a field name after a single '.' or
// a ':'. It errs on the side of more (a local or table key that shares a
// definition's name keeps that definition), never fewer.
func names(code string) map[string]bool {
	out := map[string]bool{}
	scan(code, func(i, j int) { out[code[i:j]] = true })
	return out
}

// scan calls name(i, j) for each identifier code[i:j] that names refers
// to, in order.
func scan(code string, name func(i, j int)) {
	for i := 0; i < len(code); {
		c := code[i]
		switch {
		case c == '-' && strings.HasPrefix(code[i:], "--"):
			j := strings.IndexByte(code[i:], '\n')
			if j < 0 {
				return
			}
			i += j
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(code) && code[j] != c {
				if code[j] == '\\' {
					j++
				}
				j++
			}
			i = j + 1
		case c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z':
			j := i + 1
			for j < len(code) && (code[j] == '_' || code[j] >= 'A' && code[j] <= 'Z' || code[j] >= 'a' && code[j] <= 'z' ||
				code[j] >= '0' && code[j] <= '9') {
				j++
			}
			field := i > 0 && (code[i-1] == ':' || code[i-1] == '.' && (i < 2 || code[i-2] != '.'))
			if !field {
				name(i, j)
			}
			i = j
		case c >= '0' && c <= '9':
			// A number, hex digits included, is no name.
			j := i + 1
			for j < len(code) && (code[j] == '.' || code[j] == '_' || code[j] >= 'A' && code[j] <= 'Z' ||
				code[j] >= 'a' && code[j] <= 'z' || code[j] >= '0' && code[j] <= '9') {
				j++
			}
			i = j
		default:
			i++
		}
	}
}

// constants maps the names a definition binds to number literals ("local
// L_ID, L_KV = 1, 5"), or returns nil when it binds anything else.
func constants(d def) map[string]string {
	m := constDef.FindStringSubmatch(code(d.text))
	if m == nil {
		return nil
	}
	vals := strings.Split(m[1], ",")
	if len(vals) != len(d.defines) {
		return nil
	}
	out := map[string]string{}
	for i, v := range vals {
		v = strings.TrimSpace(v)
		if !number.MatchString(v) {
			return nil
		}
		out[d.defines[i]] = v
	}
	return out
}

var (
	constDef = regexp.MustCompile(`^local [A-Za-z0-9_, ]+= ([0-9, ]+?) *(?:--[^\n]*)?\n*$`)
	number   = regexp.MustCompile(`^[0-9]+$`)
)

// inline replaces each name of consts in code with its literal.
func inline(code string, consts map[string]string) string {
	var out strings.Builder
	last := 0
	scan(code, func(i, j int) {
		if v, ok := consts[code[i:j]]; ok {
			out.WriteString(code[last:i])
			out.WriteString(v)
			last = j
		}
	})
	out.WriteString(code[last:])
	return out.String()
}
