// Package redisserver runs a throwaway redis-server for tests and
// benchmarks: the system binary on a free loopback port, without
// persistence, in a temporary directory, killed when the test ends.
//
// It never touches an already-running Redis (it never uses port 6379 or a
// port something else listens on). When redis-server is not installed it
// fails the test, naming the package to install; it does not skip.
package redisserver
