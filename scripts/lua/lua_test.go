package lua

import (
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

// TestSourceDefinesWhatItUses checks every assembled script defines each
// lib name its code refers to: a function as a branch of LIB's __index
// (lazy), anything else as a local above the code. A name the script also
// binds as a parameter or loop variable somewhere is left to the
// conformance suite, which runs the scripts on Redis (where an undefined
// global is an error).
func TestSourceDefinesWhatItUses(t *testing.T) {
	lib := libNames(t)
	def := regexp.MustCompile(`(?m)^local (?:function )?([A-Za-z_][A-Za-z0-9_, ]*)`)
	params := regexp.MustCompile(`function[A-Za-z0-9_. ]*\(([A-Za-z0-9_, ]*)\)|for ([A-Za-z0-9_, ]*) (?:in|=)`)
	lazyUse := regexp.MustCompile(`LIB\.([A-Za-z_][A-Za-z0-9_]*)`)
	for _, op := range Operations {
		t.Run(op, func(t *testing.T) {
			src, err := Source(op)
			if err != nil {
				t.Fatalf("Source(%s): %v", op, err)
			}
			defined := map[string]bool{}
			for _, m := range def.FindAllStringSubmatch(src, -1) {
				for _, n := range strings.Split(m[1], ",") {
					defined[strings.TrimSpace(n)] = true
				}
			}
			for _, m := range params.FindAllStringSubmatch(src, -1) {
				for _, n := range strings.Split(m[1]+m[2], ",") {
					defined[strings.TrimSpace(n)] = true
				}
			}
			for n := range names(src) {
				if lib[n] && !defined[n] {
					t.Errorf("script %s uses %s, which it does not define", op, n)
				}
			}
			for _, m := range lazyUse.FindAllStringSubmatch(src, -1) {
				if !strings.Contains(src, "function LIB."+m[1]+"(") || !strings.Contains(src, "k == '"+m[1]+"' then") {
					t.Errorf("script %s calls LIB.%s, which its LIB does not define", op, m[1])
				}
			}
		})
	}
}

// TestLibNamesAreNotRebound checks no lib function's name is also a
// parameter, loop variable, local or table key anywhere in the scripts:
// Source renames every use of such a name to LIB.name, which would break
// those.
func TestLibNamesAreNotRebound(t *testing.T) {
	lib := libNames(t)
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
						if n = strings.TrimSpace(n); lib[n] && !isConst(t, n) {
							t.Errorf("%s:%d binds %s, a lib function's name: %s", e.Name(), i+1, n, line)
						}
					}
				}
			}
		}
	}
}

// isConst reports whether lib name n is a value rather than a function.
func isConst(t *testing.T, n string) bool {
	t.Helper()
	for _, name := range libs {
		b, _ := files.ReadFile(name)
		if strings.Contains(string(b), "local function "+n+"(") {
			return false
		}
	}
	return true
}

// TestSourceLeavesOutUnused checks scripts carry no definition they never
// use: a script that charges no rate window defines none of lib_rate.lua.
func TestSourceLeavesOutUnused(t *testing.T) {
	for _, tc := range []struct {
		op       string
		want     []string
		wantNone []string
	}{
		{op: "acquire", want: []string{"rate_open", "rate_charge", "engine_reason", "failover_seen"}},
		{op: "release", want: []string{"rate_true_up", "drop_lease"}, wantNone: []string{"engine_reason", "rate_charge"}},
		{op: "renew", want: []string{"held_lease"}, wantNone: []string{"rate_open", "engine_reason", "quota"}},
		{op: "stats", wantNone: []string{"rate_open", "engine_reason", "failover"}},
	} {
		t.Run(tc.op, func(t *testing.T) {
			src, err := Source(tc.op)
			if err != nil {
				t.Fatalf("Source(%s): %v", tc.op, err)
			}
			for _, n := range tc.want {
				if !strings.Contains(src, "function LIB."+n+"(") {
					t.Errorf("script %s does not define %s, want it", tc.op, n)
				}
			}
			for _, n := range tc.wantNone {
				if strings.Contains(src, "function LIB."+n+"(") || strings.Contains(src, "local function "+n+"(") {
					t.Errorf("script %s defines %s, which it never uses", tc.op, n)
				}
			}
		})
	}
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
