//go:build unix

package httpguard

import "syscall"

// fileLimit returns the soft RLIMIT_NOFILE, 0 when it cannot be read.
// (Go raises the soft limit to the hard one at start.)
func fileLimit() uint64 {
	var r syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r); err != nil {
		return 0
	}
	return r.Cur
}
