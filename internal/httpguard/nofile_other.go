//go:build !unix

package httpguard

// fileLimit is unknown (0) where there is no RLIMIT_NOFILE.
func fileLimit() uint64 { return 0 }
