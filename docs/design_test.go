package docs

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/fleet"
)

// oldBrief is the name of the project's original brief, which a clone does
// not have: references to it are refused (reOld). It is spelled from the
// lower-case word so that this file does not itself read as such a
// reference; cite docs/design.md and its section instead.
var oldBrief = strings.ToUpper("design")

// The reference forms of design.md, "How to cite this document". Each
// reference stays on one line.
var (
	// reDesign matches design.md and what follows it: an anchor, a
	// guarantee, a quoted section, or a comma that ends the line (a
	// citation split across lines, which the check could not read).
	reDesign = regexp.MustCompile(`design\.md(?:(#[A-Za-z0-9_-]+)|, Guarantee (\d+)|, "([^"]*)"|(,\s*$))?`)
	// reGuarantee matches a guarantee cited anywhere, with or without the
	// document's name.
	reGuarantee = regexp.MustCompile(`\b[Gg]uarantee (\d+)\b`)
	// reOld matches citations of the original brief (oldBrief), which is
	// not in the repository.
	reOld = regexp.MustCompile(`\b` + oldBrief + `(?:\.md|'s| Guarantee| ")`)
	// reHeading matches a markdown heading.
	reHeading = regexp.MustCompile(`^#{1,6}\s+(.+?)\s*#*\s*$`)
	// reGuaranteeHeading matches the heading that defines a guarantee.
	reGuaranteeHeading = regexp.MustCompile(`^Guarantee (\d+)\b`)
)

// design is what references can name in design.md.
type design struct {
	guarantees map[int]bool
	headings   map[string]bool // heading text, exactly
	anchors    map[string]bool // GitHub anchors of the headings
}

// parseDesign collects design.md's headings, anchors and guarantee
// numbers, skipping fenced code blocks.
func parseDesign(md string) design {
	d := design{guarantees: map[int]bool{}, headings: map[string]bool{}, anchors: map[string]bool{}}
	fenced := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		m := reHeading.FindStringSubmatch(line)
		if fenced || m == nil {
			continue
		}
		d.headings[m[1]] = true
		d.anchors[anchor(m[1])] = true
		if g := reGuaranteeHeading.FindStringSubmatch(m[1]); g != nil {
			n, _ := strconv.Atoi(g[1])
			d.guarantees[n] = true
		}
	}
	return d
}

// anchor is GitHub's anchor of a heading: lower case, letters, digits,
// '-' and '_' kept, spaces as '-', everything else dropped.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// dangling returns, for one line, a description of every reference in it
// that d cannot resolve.
func dangling(d design, line string) []string {
	var bad []string
	for _, m := range reDesign.FindAllStringSubmatch(line, -1) {
		switch {
		case m[1] != "" && !d.anchors[m[1][1:]]:
			bad = append(bad, fmt.Sprintf("%s: no heading has anchor %q", m[0], m[1][1:]))
		case m[3] != "" && !d.headings[m[3]]:
			bad = append(bad, fmt.Sprintf("%s: no heading %q", m[0], m[3]))
		case m[0] == `design.md, ""`:
			bad = append(bad, fmt.Sprintf("%s: empty section", m[0]))
		case m[4] != "":
			bad = append(bad, fmt.Sprintf("%s: a citation ends the line; keep `design.md, Guarantee N` or `design.md, \"Section\"` on one line", m[0]))
		}
	}
	for _, m := range reGuarantee.FindAllStringSubmatch(line, -1) {
		if n, _ := strconv.Atoi(m[1]); !d.guarantees[n] {
			bad = append(bad, fmt.Sprintf("%s: design.md has no Guarantee %d", m[0], n))
		}
	}
	for _, m := range reOld.FindAllString(line, -1) {
		bad = append(bad, fmt.Sprintf("%s: the design is docs/design.md", m))
	}
	return bad
}

func TestDangling(t *testing.T) {
	d := parseDesign("# Top\n## Guarantees\n### Guarantee 1: No over-admission\n### Guarantee 5: Self-fencing\n" +
		"## Failure modes\n```yaml\n# not a heading\n```\n## Stable contracts\n### HTTP errors\n")
	tests := []struct {
		name string
		line string
		want int // dangling references
	}{
		{"no reference", "// plain comment", 0},
		{"bare document", "see docs/design.md.", 0},
		{"guarantee", "// (docs/design.md, Guarantee 5)", 0},
		{"bare guarantee", "its leases were returned (Guarantee 1).", 0},
		{"lower-case guarantee", "for reconciliation (guarantee 5)", 0},
		{"section", `(docs/design.md, "Failure modes")`, 0},
		{"nested section", `docs/design.md, "HTTP errors"`, 0},
		{"anchor", "[errors](design.md#http-errors)", 0},
		{"anchor of a guarantee", "docs/design.md#guarantee-5-self-fencing", 0},
		{"missing guarantee", "// (docs/design.md, Guarantee 8)", 1},
		{"missing bare guarantee", "returned (Guarantee 9)", 1},
		{"missing section", `docs/design.md, "Block lease"`, 1},
		{"section is case-sensitive", `docs/design.md, "failure modes"`, 1},
		{"heading inside a code block", `docs/design.md, "not a heading"`, 1},
		{"empty section", `docs/design.md, ""`, 1},
		{"missing anchor", "design.md#block-lease", 1},
		{"a list of files", "(design.md, operations.md, benchmarks.md)", 0},
		{"citation split across lines", "// lease timings (docs/design.md,", 1},
		// The obsolete forms reOld must refuse, spelled from oldBrief so
		// that this file cites nothing a clone lacks.
		{"old brief", "guarantees of " + oldBrief + ".md against", 1},
		{"old brief, guarantee", "(" + oldBrief + " Guarantee 5)", 1},
		{"old brief, section", "(" + oldBrief + ` "Block lease")`, 1},
		{"old brief, possessive", "keeps " + oldBrief + "'s crash-reclaim bound", 1},
		{"a guarantee counts once", "docs/design.md, Guarantee 7 and Guarantee 8", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := dangling(d, tt.line); len(got) != tt.want {
				t.Errorf("dangling(%q) = %q, want %d", tt.line, got, tt.want)
			}
		})
	}
}

func TestAnchor(t *testing.T) {
	tests := []struct{ heading, want string }{
		{"Failure modes", "failure-modes"},
		{"Guarantee 5: Self-fencing", "guarantee-5-self-fencing"},
		{"A request's way through the router", "a-requests-way-through-the-router"},
		{"Commands and flags", "commands-and-flags"},
	}
	for _, tt := range tests {
		if got := anchor(tt.heading); got != tt.want {
			t.Errorf("anchor(%q) = %q, want %q", tt.heading, got, tt.want)
		}
	}
}

// TestDesignHasGuarantees checks the numbering the code cites: 1 to 8.
func TestDesignHasGuarantees(t *testing.T) {
	md, err := os.ReadFile("design.md")
	if err != nil {
		t.Fatal(err)
	}
	d := parseDesign(string(md))
	for n := 1; n <= 8; n++ {
		if !d.guarantees[n] {
			t.Errorf("design.md has no heading \"Guarantee %d: …\"", n)
		}
	}
}

// TestReferencesResolve walks every *.go and *.md file of the repository
// (this directory's parent, hidden directories skipped) and fails on every
// reference to the design that design.md cannot resolve.
func TestReferencesResolve(t *testing.T) {
	md, err := os.ReadFile("design.md")
	if err != nil {
		t.Fatal(err)
	}
	d := parseDesign(string(md))
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	self, err := filepath.Abs("design_test.go") // its table cites dangling references on purpose
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	err = filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if path != root && strings.HasPrefix(e.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if path == self || !(strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".md")) {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		files++
		rel, _ := filepath.Rel(root, path)
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for n := 1; sc.Scan(); n++ {
			for _, b := range dangling(d, sc.Text()) {
				t.Errorf("%s:%d: %s", rel, n, b)
			}
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Errorf("walked %d *.go and *.md files under %s; want the whole repository", files, root)
	}
}

// TestFleetSampleParses holds the fleet file design.md shows (the first
// yaml block after the heading "Fleet file") to the real parser.
func TestFleetSampleParses(t *testing.T) {
	md, err := os.ReadFile("design.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(md), "\n### Fleet file\n")
	if !ok {
		t.Fatal("design.md has no heading \"Fleet file\"")
	}
	_, rest, ok = strings.Cut(rest, "```yaml\n")
	if !ok {
		t.Fatal("design.md, \"Fleet file\": no yaml block")
	}
	sample, _, ok := strings.Cut(rest, "```")
	if !ok {
		t.Fatal("design.md, \"Fleet file\": unterminated yaml block")
	}
	f, err := fleet.Parse([]byte(sample))
	if err != nil {
		t.Fatalf("fleet.Parse(design.md sample): %v", err)
	}
	if len(f.Pools) != 1 || len(f.Pools[0].Engines) != 2 || len(f.Tenants) != 1 || len(f.Priorities) != 2 {
		t.Errorf("fleet.Parse(design.md sample) = %d pools, %d tenants, %d priorities; want 1 pool of 2 engines, 1 tenant, 2 priorities",
			len(f.Pools), len(f.Tenants), len(f.Priorities))
	}
}
