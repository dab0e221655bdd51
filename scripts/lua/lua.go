// Package lua holds the Redis ledger's Lua code: one Redis function
// library (FUNCTION LOAD, FCALL) with one function per ledger operation,
// embedded so the binary carries it.
//
// Each operation's file starts with a comment listing its KEYS, ARGV and
// reply shape. lib.lua holds what every operation shares (key layout,
// sweep, lease bookkeeping), lib_admit.lua the admission rule's helpers and
// lib_rate.lua tenants' rate windows. Library assembles them: the lib
// files at the top of the library, where Redis runs them once, when it
// loads the library, then each operation's file as the body of the
// function it registers. A call runs only its operation's body: the
// helpers are defined already (an EVAL script defines each helper it
// holds, as a closure, on every call). Number constants are written as
// literals, so the functions capture fewer upvalues.
package lua

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
)

//go:embed *.lua
var files embed.FS

// Operations lists the operations the library registers a function for.
var Operations = []string{
	"configure", "drain", "keepalive", "acquire", "renew", "resize", "grow",
	"release", "reassert", "observe", "sweep", "stats", "list", "totals",
}

// libs lists the shared files in the order their definitions may use one
// another's.
var libs = []string{"lib.lua", "lib_admit.lua", "lib_rate.lua"}

// Lib is the assembled library.
type Lib struct {
	Name      string            // the library's name: leasehold_<version>
	Source    string            // FUNCTION LOAD's argument
	Functions map[string]string // operation -> its function's name
}

// Library returns the library. Its name and its functions' names carry a
// hash of its source, so routers of two versions sharing a Redis each call
// their own (Redis function names are global across libraries).
func Library() (Lib, error) {
	var lib strings.Builder
	rename := map[string]string{}
	for _, name := range libs {
		b, err := files.ReadFile(name)
		if err != nil {
			return Lib{}, fmt.Errorf("library: read %s: %w", name, err)
		}
		for _, d := range split(string(b)) {
			if c := constants(d); c != nil {
				for n, v := range c {
					rename[n] = v
				}
				continue
			}
			lib.WriteString(d.text)
		}
	}
	bodies := make([]string, len(Operations))
	for i, op := range Operations {
		body, err := files.ReadFile(op + ".lua")
		if err != nil {
			return Lib{}, fmt.Errorf("library: read %s.lua: %w", op, err)
		}
		bodies[i] = string(body)
	}
	sum := sha1.New()
	sum.Write([]byte(lib.String()))
	for _, b := range bodies {
		sum.Write([]byte(b))
	}
	version := hex.EncodeToString(sum.Sum(nil))[:12]
	out := Lib{Name: "leasehold_" + version, Functions: map[string]string{}}
	var src strings.Builder
	fmt.Fprintf(&src, "#!lua name=%s\n", out.Name)
	src.WriteString(lib.String())
	for i, op := range Operations {
		fn := "lh_" + version + "_" + op
		out.Functions[op] = fn
		fmt.Fprintf(&src, "\nredis.register_function('%s', function(KEYS, ARGV)\nopen_call(KEYS, ARGV)\n%s\nend)\n", fn, bodies[i])
	}
	out.Source = inline(src.String(), rename)
	return out, nil
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

// scan calls name(i, j) for each identifier code[i:j] that Lua code
// refers to, in order: every name outside comments and string literals,
// except a field name after a single '.' or a ':'.
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
