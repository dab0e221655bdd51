package redis

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/ledger"
)

func TestParseSentinelURL(t *testing.T) {
	for _, tc := range []struct {
		name, url string
		check     func(t *testing.T, m *multiURL)
	}{
		{"two sentinels", "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster", func(t *testing.T, m *multiURL) {
			o := mustFailover(t, m)
			if o.MasterName != "mymaster" || !slices.Equal(o.SentinelAddrs, []string{"127.0.0.1:26379", "127.0.0.1:26380"}) || o.DB != 0 {
				t.Errorf("master %q sentinels %v db %d, want mymaster, both sentinels in order, db 0", o.MasterName, o.SentinelAddrs, o.DB)
			}
			if o.TLSConfig != nil || o.Username != "" || o.Password != "" || o.SentinelPassword != "" {
				t.Errorf("TLS %v user %q password %q sentinel password %q, want none", o.TLSConfig, o.Username, o.Password, o.SentinelPassword)
			}
			if !o.ContextTimeoutEnabled {
				t.Error("ContextTimeoutEnabled = false, want every call's deadline to bound its socket I/O")
			}
		}},
		{"credentials, db and parameters", "redis+sentinel://app:s3cret@h1:1,h2:2,h3:3/m?db=3&wait_replicas=1&wait_timeout=250ms&dial_timeout=2s&sentinel_username=mon&sentinel_password=sp", func(t *testing.T, m *multiURL) {
			o := mustFailover(t, m)
			if o.Username != "app" || o.Password != "s3cret" || o.SentinelUsername != "mon" || o.SentinelPassword != "sp" {
				t.Errorf("data user %q:%q sentinel user %q:%q, want app:s3cret (user info) and mon:sp (sentinel_*)", o.Username, o.Password, o.SentinelUsername, o.SentinelPassword)
			}
			if o.DB != 3 || o.DialTimeout != 2*time.Second || len(o.SentinelAddrs) != 3 {
				t.Errorf("db %d dial timeout %s sentinels %v, want 3, 2s, three", o.DB, o.DialTimeout, o.SentinelAddrs)
			}
			var opts Options
			m.params.apply(&opts)
			if opts.WaitReplicas != 1 || opts.WaitTimeout != 250*time.Millisecond {
				t.Errorf("wait_replicas %d wait_timeout %s, want 1 and 250ms", opts.WaitReplicas, opts.WaitTimeout)
			}
		}},
		{"password only", "redis+sentinel://:pw@h:1/m", func(t *testing.T, m *multiURL) {
			o := mustFailover(t, m)
			if o.Username != "" || o.Password != "pw" {
				t.Errorf("user %q password %q, want no user, password pw", o.Username, o.Password)
			}
		}},
		{"TLS", "rediss+sentinel://h:1/m?skip_verify=true", func(t *testing.T, m *multiURL) {
			o := mustFailover(t, m)
			if o.TLSConfig == nil || !o.TLSConfig.InsecureSkipVerify || o.TLSConfig.ServerName != "" {
				t.Errorf("TLS config %+v, want TLS, skip_verify, no fixed server name", o.TLSConfig)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := parseMulti(tc.url)
			if err != nil {
				t.Fatalf("parseMulti(%q): %v", tc.url, err)
			}
			if m.cluster {
				t.Fatalf("parseMulti(%q) read a cluster URL", tc.url)
			}
			tc.check(t, m)
		})
	}
}

func TestParseClusterURL(t *testing.T) {
	for _, tc := range []struct {
		name, url string
		check     func(t *testing.T, m *multiURL)
	}{
		{"three seeds", "redis+cluster://h1:7000,h2:7001,[::1]:7002", func(t *testing.T, m *multiURL) {
			o := mustCluster(t, m)
			if !slices.Equal(o.Addrs, []string{"h1:7000", "h2:7001", "[::1]:7002"}) {
				t.Errorf("seeds %v, want the three hosts in order", o.Addrs)
			}
			if o.TLSConfig != nil || !o.ContextTimeoutEnabled || o.ReadOnly || o.RouteByLatency || o.RouteRandomly {
				t.Errorf("options %+v, want no TLS, context timeouts, every command on a master", o)
			}
		}},
		{"TLS, credentials, parameters", "rediss+cluster://u:p@h:1/?pool_size=7&wait_replicas=2", func(t *testing.T, m *multiURL) {
			o := mustCluster(t, m)
			if o.TLSConfig == nil || o.TLSConfig.ServerName != "" || o.TLSConfig.MinVersion < 0x0303 {
				t.Errorf("TLS config %+v, want TLS >= 1.2 with no fixed server name", o.TLSConfig)
			}
			if o.Username != "u" || o.Password != "p" || o.PoolSize != 7 {
				t.Errorf("user %q password %q pool size %d, want u, p, 7", o.Username, o.Password, o.PoolSize)
			}
			var opts Options
			m.params.apply(&opts)
			if opts.WaitReplicas != 2 {
				t.Errorf("wait_replicas %d, want 2", opts.WaitReplicas)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := parseMulti(tc.url)
			if err != nil {
				t.Fatalf("parseMulti(%q): %v", tc.url, err)
			}
			if !m.cluster {
				t.Fatalf("parseMulti(%q) read a sentinel URL", tc.url)
			}
			tc.check(t, m)
		})
	}
}

// TestBadMultiURLs: every malformed redis+sentinel:// or redis+cluster://
// URL is refused with ErrInvalidArgument, an error that names the part at
// fault, and no password in it.
func TestBadMultiURLs(t *testing.T) {
	for _, tc := range []struct{ name, url, part string }{
		{"no master name", "redis+sentinel://h1:1", "master name: missing"},
		{"empty master name", "redis+sentinel://h1:1/", "master name: missing"},
		{"no hosts", "redis+sentinel:///m", "hosts: none given"},
		{"host without port", "redis+sentinel://h1,h2:2/m", `host 1 of 2 ("h1"): not host:port`},
		{"empty host", "redis+sentinel://h1:1,:2/m", `host 2 of 2 (":2"): empty host`},
		{"port out of range", "redis+sentinel://h1:99999/m", `port "99999"`},
		{"port not a number", "redis+cluster://h1:x", `port "x"`},
		{"empty host in list", "redis+cluster://h1:1,,h2:2", `host 2 of 3 (""): not host:port`},
		{"two path segments", "redis+sentinel://h1:1/a/b", `path "/a/b": want one segment`},
		{"bad db", "redis+sentinel://h1:1/m?db=x", `parameter db: "x"`},
		{"negative db", "redis+sentinel://h1:1/m?db=-1", `parameter db: "-1"`},
		{"master_name parameter", "redis+sentinel://h1:1/m?master_name=o", "parameter master_name: refused"},
		{"addr parameter", "redis+cluster://h1:1?addr=h2:2", "parameter addr: refused"},
		{"password parameter", "redis+sentinel://h1:1/m?password=x", "parameter password: refused"},
		{"sentinel user without password", "redis+sentinel://h1:1/m?sentinel_username=u", "sentinel_username: given without sentinel_password"},
		{"bad wait_replicas", "redis+sentinel://h1:1/m?wait_replicas=-1", `wait_replicas = "-1"`},
		{"bad wait_timeout", "redis+cluster://h1:1?wait_timeout=0s", `wait_timeout = "0s"`},
		{"skip_verify without TLS", "redis+sentinel://h1:1/m?skip_verify=true", "parameter skip_verify: only with TLS (rediss+sentinel)"},
		{"bad go-redis parameter", "redis+sentinel://h1:1/m?dial_timeout=zz", "invalid dial_timeout duration"},
		{"unknown parameter", "redis+sentinel://h1:1/m?bogus=1", "unexpected option: bogus"},
		{"routing to replicas (sentinel)", "redis+sentinel://h1:1/m?route_randomly=true", "parameter route_randomly: refused"},
		{"routing to replicas (cluster)", "redis+cluster://h1:1?read_only=true", "parameter read_only: refused"},
		{"replica only", "redis+sentinel://h1:1/m?replica_only=true", "parameter replica_only: refused"},
		{"cluster path", "redis+cluster://h:1/0", `path "/0": a Redis Cluster has database 0 only`},
		{"cluster db", "redis+cluster://h:1?db=1", "parameter db: a Redis Cluster has database 0 only"},
		{"cluster sentinel password", "redis+cluster://h:1?sentinel_password=x", "parameter sentinel_password: only for redis+sentinel://"},
		{"bad escape", "redis+sentinel://u:p%zz@h:1/m", `invalid URL escape "%zz"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseMulti(tc.url)
			if err == nil {
				// go-redis's own parameters are read when the client is made.
				var c interface{ Close() error }
				c, _, err = newClient(tc.url)
				if err == nil {
					_ = c.Close()
					t.Fatalf("newClient(%q) succeeded, want an error naming %q", tc.url, tc.part)
				}
			}
			if !errors.Is(err, ledger.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.part) {
				t.Errorf("parse %q: error %v, want ErrInvalidArgument naming %q", tc.url, err, tc.part)
			}
		})
	}
	for _, u := range []string{
		"redis+cluster://u:topsecret@h:1?bogus=1",
		"redis+sentinel://u:topsecret@h:1/m?sentinel_password=alsosecret&bogus=1",
		"redis+sentinel://u:topsecret@h:1/m?sentinel_password=alsosecret&db=x",
		"rediss+sentinel://u:topsecret@h:1,h:2/m?sentinel_password=alsosecret&wait_replicas=x",
	} {
		c, _, err := newClient(u)
		if err == nil {
			_ = c.Close()
			t.Fatalf("newClient(%q) succeeded, want an error", u)
		}
		if strings.Contains(err.Error(), "topsecret") || strings.Contains(err.Error(), "alsosecret") {
			t.Errorf("newClient(%q) error %q shows a password", u, err)
		}
	}
	if _, _, err := newClient("redis+zk://h:1"); !errors.Is(err, ledger.ErrInvalidArgument) || !strings.Contains(err.Error(), `scheme "redis+zk"`) {
		t.Errorf("newClient(redis+zk://) error %v, want ErrInvalidArgument naming the scheme", err)
	}
}

func mustFailover(t *testing.T, m *multiURL) *goredis.FailoverOptions {
	t.Helper()
	o, err := m.failoverOptions()
	if err != nil {
		t.Fatalf("failoverOptions: %v", err)
	}
	return o
}

func mustCluster(t *testing.T, m *multiURL) *goredis.ClusterOptions {
	t.Helper()
	o, err := m.clusterOptions()
	if err != nil {
		t.Fatalf("clusterOptions: %v", err)
	}
	return o
}
