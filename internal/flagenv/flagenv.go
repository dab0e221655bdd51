// Package flagenv derives an environment variable from every command-line
// flag (prefix + the flag's name upper-cased, "-" as "_") and applies the
// variables to the flags not given on the command line: one rule for every
// Leasehold binary, so a flag and its variable never drift apart.
package flagenv

import (
	"errors"
	"flag"
	"fmt"
	"strings"
)

// Name returns the environment variable of flagName under prefix:
// Name("LEASEHOLD_", "grpc-listen") is "LEASEHOLD_GRPC_LISTEN".
func Name(prefix, flagName string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Apply sets every flag of fs not given on the command line from its
// variable, when lookup finds it; a flag on the command line wins. Call it
// after fs.Parse. Errors name the variable.
func Apply(fs *flag.FlagSet, prefix string, lookup func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] {
			return
		}
		env := Name(prefix, f.Name)
		if v, ok := lookup(env); ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", env, v, err))
			}
		}
	})
	return errors.Join(errs...)
}

// Usage returns fs's usage function: the synopsis, that every flag can
// also be set as prefix<FLAG_NAME> (with example's variable as the
// example; a flag given on the command line wins), each note on a line of
// its own, then the flags.
func Usage(fs *flag.FlagSet, synopsis, prefix, example string, notes ...string) func() {
	return func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: %s\n\nEvery flag can also be set in the environment as %s<FLAG_NAME> (--%s as %s); a flag given on the command line wins.\n",
			synopsis, prefix, example, Name(prefix, example))
		for _, n := range notes {
			fmt.Fprintln(w, n)
		}
		fmt.Fprintln(w)
		fs.PrintDefaults()
	}
}
