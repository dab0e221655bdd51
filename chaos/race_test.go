//go:build race

package chaos

// raceEnabled: this test binary runs under the race detector, and with it
// the etcd server TestScenariosShortEtcd embeds (several times slower).
const raceEnabled = true
