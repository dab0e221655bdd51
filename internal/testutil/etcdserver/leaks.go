package etcdserver

import "go.uber.org/goleak"

// IgnoreLeaks lists the goroutines an embedded etcd leaves behind after it
// stopped, for goleak.VerifyTestMain in packages that use this one.
func IgnoreLeaks() []goleak.Option {
	return []goleak.Option{}
}
