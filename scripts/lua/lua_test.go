package lua

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// libNames returns every top-level name the lib files define.
func libNames(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, name := range libs {
		b, err := files.ReadFile(name)
		if err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		for _, d := range split(string(b)) {
			for _, n := range d.defines {
				out[n] = true
			}
		}
	}
	return out
}

// TestLibraryDefinesWhatItUses checks the library defines, at its top,
// every lib name its code refers to, and that no constant's name is left
// once Library has written the literals in. A misspelt name is left to the
// conformance suite, which runs the library on Redis (where an undefined
// global is an error).
func TestLibraryDefinesWhatItUses(t *testing.T) {
	lib, consts := libNames(t), numberConstants(t)
	l, err := Library()
	if err != nil {
		t.Fatalf("Library: %v", err)
	}
	def := regexp.MustCompile(`(?m)^local (?:function )?([A-Za-z_][A-Za-z0-9_, ]*)`)
	defined := map[string]bool{}
	for _, m := range def.FindAllStringSubmatch(l.Source, -1) {
		for _, n := range strings.Split(m[1], ",") {
			defined[strings.TrimSpace(n)] = true
		}
	}
	for n := range names(l.Source) {
		if consts[n] {
			t.Errorf("the library still names constant %s", n)
		} else if lib[n] && !defined[n] {
			t.Errorf("the library uses %s, which it does not define", n)
		}
	}
}

// TestLibraryRegistersEveryOperation checks the library registers one
// function per operation, named with the library's version, and that
// Library is deterministic (routers of one build load one library).
func TestLibraryRegistersEveryOperation(t *testing.T) {
	l, err := Library()
	if err != nil {
		t.Fatalf("Library: %v", err)
	}
	if !strings.HasPrefix(l.Source, "#!lua name="+l.Name+"\n") {
		t.Errorf("library source starts %q, want the shebang naming %s", l.Source[:40], l.Name)
	}
	version := strings.TrimPrefix(l.Name, "leasehold_")
	for _, op := range Operations {
		fn := l.Functions[op]
		if fn != "lh_"+version+"_"+op {
			t.Errorf("function of %s = %q, want lh_%s_%s", op, fn, version, op)
		}
		if strings.Count(l.Source, "redis.register_function('"+fn+"', function(KEYS, ARGV)\nopen_call(KEYS, ARGV)\n") != 1 {
			t.Errorf("the library does not register %s once, opening the call", fn)
		}
	}
	again, err := Library()
	if err != nil || again.Source != l.Source || again.Name != l.Name {
		t.Errorf("Library is not deterministic")
	}
}

// TestLibNamesAreNotRebound checks no lib constant's name is also a
// parameter, loop variable, local or table key anywhere in the scripts:
// Library writes the constant's literal in place of every use of its name,
// which would break those.
func TestLibNamesAreNotRebound(t *testing.T) {
	consts := numberConstants(t)
	entries, err := files.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	binds := []*regexp.Regexp{
		regexp.MustCompile(`function[A-Za-z0-9_. ]*\(([A-Za-z0-9_, ]*)\)`),
		regexp.MustCompile(`for ([A-Za-z0-9_, ]*) (?:in|=)`),
		regexp.MustCompile(`local ([A-Za-z0-9_, ]*)(?:=|$)`),
		regexp.MustCompile(`[{,] *([A-Za-z_][A-Za-z0-9_]*) *=[^=]`),
	}
	for _, e := range entries {
		b, err := files.ReadFile(e.Name())
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if c, _, ok := strings.Cut(line, "--"); ok {
				line = c
			}
			if strings.HasPrefix(line, "local function ") {
				line = line[strings.Index(line, "("):]
				line = "function" + line
			}
			for _, re := range binds {
				for _, m := range re.FindAllStringSubmatch(line, -1) {
					for _, n := range strings.Split(m[1], ",") {
						if n = strings.TrimSpace(n); consts[n] && !isConstDef(line) {
							t.Errorf("%s:%d binds %s, a lib constant's name: %s", e.Name(), i+1, n, line)
						}
					}
				}
			}
		}
	}
}

// isConstDef reports whether line defines number constants.
func isConstDef(line string) bool {
	ds := split(line + "\n")
	return len(ds) == 1 && constants(ds[0]) != nil
}

// numberConstants returns the lib names Library writes as literals: those
// bound to numbers (constants).
func numberConstants(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, name := range libs {
		b, err := files.ReadFile(name)
		if err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		for _, d := range split(string(b)) {
			for n := range constants(d) {
				out[n] = true
			}
		}
	}
	return out
}

// names returns the identifiers Lua code refers to (scan's).
func names(code string) map[string]bool {
	out := map[string]bool{}
	scan(code, func(i, j int) { out[code[i:j]] = true })
	return out
}

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		name, code string
		want, not  []string
	}{
		{name: "calls and concatenation", code: "local x = f(a) .. b..c", want: []string{"f", "a", "b", "c", "x"}},
		{name: "fields are not names", code: "m.epoch = t:get(e.cap)", want: []string{"m", "t", "e"}, not: []string{"epoch", "get", "cap"}},
		{name: "comments and strings", code: "g('meta', \"sweep\\\"x\") -- charge(y)\nh()", want: []string{"g", "h"},
			not: []string{"meta", "sweep", "x", "charge", "y"}},
		{name: "numbers", code: "local n = 0x1f + 2e5", want: []string{"n"}, not: []string{"x1f", "e5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := names(tc.code)
			for _, n := range tc.want {
				if !got[n] {
					t.Errorf("names(%q) lacks %q; got %v", tc.code, n, got)
				}
			}
			for _, n := range tc.not {
				if got[n] {
					t.Errorf("names(%q) has %q; got %v", tc.code, n, got)
				}
			}
		})
	}
}

func TestConstants(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		want       map[string]string
	}{
		{name: "numbers", text: "-- doc\nlocal A, B = 1, 22 -- note\n\n", want: map[string]string{"A": "1", "B": "22"}},
		{name: "a string", text: "local P = 'x'\n"},
		{name: "an expression", text: "local A = 1 + 2\n"},
		{name: "code after it", text: "local A = 1\nA = A + 1\n"},
		{name: "fewer values", text: "local A, B = 1\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ds := split(tc.text)
			if len(ds) != 1 {
				t.Fatalf("split(%q) = %d definitions, want 1", tc.text, len(ds))
			}
			got := constants(ds[0])
			if len(got) != len(tc.want) {
				t.Fatalf("constants(%q) = %v, want %v", tc.text, got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("constants(%q)[%s] = %q, want %q", tc.text, k, got[k], v)
				}
			}
		})
	}
	if got, want := inline("x = L_A + t.L_A .. 'L_A' -- L_A\n", map[string]string{"L_A": "3"}), "x = 3 + t.L_A .. 'L_A' -- L_A\n"; got != want {
		t.Errorf("inline = %q, want %q", got, want)
	}
}

// TestScratchFieldsAllSet checks that engine and tenant (lib.lua) set
// every field any code sets on the tables they fill: those are scratch
// tables the library keeps between calls, so a field only some other code
// sets would carry one call's value into the next. Engines are held as e,
// e1, s and chosen, tenants as t; the check reads every assignment to a
// field of those names, at a line's start or after then, do or else.
func TestScratchFieldsAllSet(t *testing.T) {
	lhs := regexp.MustCompile(`(?:^|\bthen\b|\bdo\b|\belse\b)\s*((?:[A-Za-z_]\w*\.\w+\s*,\s*)*[A-Za-z_]\w*\.\w+)\s*=[^=]`)
	field := regexp.MustCompile(`([A-Za-z_]\w*)\.(\w+)`)
	holds := map[string]string{"e": "engine", "e1": "engine", "s": "engine", "chosen": "engine", "t": "tenant"}
	set := map[string]map[string]bool{"engine": {}, "tenant": {}}     // by the filler
	other := map[string]map[string]string{"engine": {}, "tenant": {}} // elsewhere: field -> where
	entries, err := files.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range entries {
		b, err := files.ReadFile(ent.Name())
		if err != nil {
			t.Fatal(err)
		}
		filler := ""
		for i, line := range strings.Split(string(b), "\n") {
			code, _, _ := strings.Cut(line, "--")
			if ent.Name() == "lib.lua" {
				switch {
				case strings.HasPrefix(code, "local function engine("):
					filler = "engine"
				case strings.HasPrefix(code, "local function tenant("):
					filler = "tenant"
				case code == "end":
					filler = ""
				}
			}
			for _, m := range lhs.FindAllStringSubmatch(code, -1) {
				for _, f := range field.FindAllStringSubmatch(m[1], -1) {
					kind, ok := holds[f[1]]
					if !ok {
						continue
					}
					if filler == kind {
						set[kind][f[2]] = true
					} else {
						other[kind][f[2]] = fmt.Sprintf("%s:%d", ent.Name(), i+1)
					}
				}
			}
		}
	}
	for kind, fields := range other {
		if len(set[kind]) == 0 {
			t.Fatalf("found no field %s sets", kind)
		}
		for f, where := range fields {
			if !set[kind][f] {
				t.Errorf("%s sets field %s of a%s, which %s does not set", where, f, map[bool]string{true: "n", false: ""}[kind == "engine"]+" "+kind, kind)
			}
		}
	}
	if len(other["engine"]) < 10 {
		t.Errorf("found %d engine fields set outside engine, want the dozen lib_admit.lua sets: is the pattern still right?", len(other["engine"]))
	}
}
