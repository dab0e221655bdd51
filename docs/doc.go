// Package docs holds Leasehold's design and operator documents
// (design.md, operations.md, benchmarks.md) and the test that keeps every
// citation of the design resolvable: a guarantee number, section heading
// or anchor cited in any *.go or *.md file of the repository must exist in
// design.md, whose first section ("How to cite this document") states the
// citation forms. The package has no code of its own; it exists so that
// `go test ./...` runs that check.
package docs
