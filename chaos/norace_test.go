//go:build !race

package chaos

// raceEnabled: see race_test.go.
const raceEnabled = false
