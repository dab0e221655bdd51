package metricinit

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Zero creates every series of vec for the product of values, one list of
// values per label in the family's label order (a list of one value fixes
// that label), at zero. It returns an error naming the family's
// description when the lists do not match its labels; no series is then
// created.
func Zero(vec *prometheus.MetricVec, values ...[]string) error {
	var all [][]string
	product(values, nil, func(lvs []string) { all = append(all, lvs) })
	for _, lvs := range all {
		if _, err := vec.GetMetricWithLabelValues(lvs...); err != nil {
			return fmt.Errorf("metricinit: %w", err)
		}
	}
	return nil
}

// product calls f with each combination of values, in order.
func product(values [][]string, prefix []string, f func([]string)) {
	if len(values) == 0 {
		f(append([]string(nil), prefix...))
		return
	}
	for _, v := range values[0] {
		product(values[1:], append(prefix, v), f)
	}
}

// ZeroAll is Zero for each family and its value lists; it returns the
// errors joined.
func ZeroAll(families map[*prometheus.MetricVec][][]string) error {
	var errs []error
	for vec, values := range families {
		errs = append(errs, Zero(vec, values...))
	}
	return errors.Join(errs...)
}
