package deploy

import (
	"regexp"
	"sort"
	"strings"
)

// A reference to a metric in a PromQL expression, with the label names its
// selector matches on.
type metricRef struct {
	name   string
	labels []string
}

var (
	// Grafana variables: $pool, ${pool}, $__rate_interval, [[pool]].
	grafanaVarRe = regexp.MustCompile(`\$\{[^}]*\}|\$[A-Za-z_][A-Za-z0-9_]*|\[\[[^\]]*\]\]`)
	stringRe     = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	rangeRe      = regexp.MustCompile(`\[[^\]]*\]`)
	// by/without/on/ignoring/group_left/group_right label lists.
	groupingRe = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	selectorRe = regexp.MustCompile(`([A-Za-z_:][A-Za-z0-9_:]*)?\s*\{([^}]*)\}`)
	matcherRe  = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)`)
	tokenRe    = regexp.MustCompile(`[A-Za-z0-9_:.]+`)
)

// promqlKeywords are identifiers that are not metric names.
var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true,
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"inf": true, "nan": true, "Inf": true, "NaN": true,
}

// promqlRefs returns the metric names an expression selects, each with the
// label names of its selector, and the label names of its grouping clauses.
// It is a scanner, not a parser: enough for the expressions in this
// directory, which use selectors, functions, aggregations and binary
// operators.
func promqlRefs(expr string) (refs []metricRef, grouping []string) {
	e := grafanaVarRe.ReplaceAllString(expr, "X")
	// Label names in selectors, before their values are dropped.
	e = stringRe.ReplaceAllString(e, `""`)
	e = selectorRe.ReplaceAllStringFunc(e, func(s string) string {
		m := selectorRe.FindStringSubmatch(s)
		var labels []string
		for _, mm := range matcherRe.FindAllStringSubmatch(m[2], -1) {
			labels = append(labels, mm[1])
		}
		if m[1] == "" || promqlKeywords[m[1]] {
			// {__name__=...} or a bare selector: not used here.
			return s
		}
		refs = append(refs, metricRef{name: m[1], labels: labels})
		return " "
	})
	e = rangeRe.ReplaceAllString(e, " ")
	e = groupingRe.ReplaceAllStringFunc(e, func(s string) string {
		m := groupingRe.FindStringSubmatch(s)
		for _, l := range strings.Split(m[2], ",") {
			if l = strings.TrimSpace(l); l != "" {
				grouping = append(grouping, l)
			}
		}
		return " "
	})
	for _, loc := range tokenRe.FindAllStringIndex(e, -1) {
		tok := e[loc[0]:loc[1]]
		if tok[0] >= '0' && tok[0] <= '9' || tok[0] == '.' || promqlKeywords[tok] || tok == "X" {
			continue
		}
		rest := strings.TrimLeft(e[loc[1]:], " \t\n")
		if strings.HasPrefix(rest, "(") {
			continue // a function or aggregation
		}
		refs = append(refs, metricRef{name: tok})
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].name < refs[j].name })
	return refs, grouping
}
