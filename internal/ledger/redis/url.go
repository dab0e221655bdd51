package redis

// Ledger URLs. Open takes one of three deployments:
//
//	redis://[user:password@]host:port[/db]                  one server
//	redis+sentinel://[user:password@]host:port[,host:port]/MASTER_NAME[?db=N]
//	                                                        the primary a set of Sentinels names
//	redis+cluster://[user:password@]host:port[,host:port]   a Redis Cluster (seed nodes)
//
// An extra s (rediss, rediss+sentinel, rediss+cluster) is TLS. The user
// info authenticates to the servers that hold data (the primary and its
// replicas, or the cluster's nodes), as for redis://; Sentinels that
// require their own password take sentinel_username and sentinel_password.
// wait_replicas and wait_timeout are the ledger's own (Options); every
// other parameter is go-redis's (dial_timeout, pool_size, skip_verify...),
// except those that would send the ledger's reads or writes to a replica,
// which are refused: the ledger reads what it just wrote.
//
// With TLS on the multi-node forms each node's certificate is checked
// against the address the client dials (the one Sentinel or the cluster
// reports, usually an IP), not against the first seed host.

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/leasehold/leasehold/internal/ledger"
)

// URL schemes Open accepts.
const (
	SchemeRedis       = "redis"
	SchemeRedisTLS    = "rediss"
	SchemeSentinel    = "redis+sentinel"
	SchemeSentinelTLS = "rediss+sentinel"
	SchemeCluster     = "redis+cluster"
	SchemeClusterTLS  = "rediss+cluster"
)

// Schemes lists the URL schemes Open accepts, each with "://".
var Schemes = []string{
	SchemeRedis + "://", SchemeRedisTLS + "://",
	SchemeSentinel + "://", SchemeSentinelTLS + "://",
	SchemeCluster + "://", SchemeClusterTLS + "://",
}

// The forms of the multi-node URLs, for errors.
const (
	sentinelForm = "redis+sentinel://[user:password@]host:port[,host:port]/MASTER_NAME[?db=N]"
	clusterForm  = "redis+cluster://[user:password@]host:port[,host:port]"
)

// urlParams are the query parameters the ledger reads itself.
type urlParams struct {
	waitReplicas *int
	waitTimeout  *time.Duration
}

// apply sets what the URL gave on opts.
func (p urlParams) apply(opts *Options) {
	if p.waitReplicas != nil {
		opts.WaitReplicas = *p.waitReplicas
	}
	if p.waitTimeout != nil {
		opts.WaitTimeout = *p.waitTimeout
	}
}

// takeParams removes wait_replicas and wait_timeout from q (go-redis
// refuses unknown parameters) and parses them; redacted names the URL in
// errors.
func takeParams(q url.Values, redacted string) (urlParams, error) {
	var p urlParams
	if v := q.Get("wait_replicas"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return p, fmt.Errorf("%w: open redis ledger %s: wait_replicas = %q: want a whole number >= 0", ledger.ErrInvalidArgument, redacted, v)
		}
		p.waitReplicas = &n
	}
	if v := q.Get("wait_timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return p, fmt.Errorf("%w: open redis ledger %s: wait_timeout = %q: want a duration > 0 (e.g. 100ms)", ledger.ErrInvalidArgument, redacted, v)
		}
		p.waitTimeout = &d
	}
	q.Del("wait_replicas")
	q.Del("wait_timeout")
	return p, nil
}

// newClient parses rawURL and returns a client of the deployment it names
// (the caller closes it) and the ledger's own parameters.
func newClient(rawURL string) (goredis.UniversalClient, urlParams, error) {
	scheme, _, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, urlParams{}, fmt.Errorf("%w: open redis ledger: no scheme; want one of %s", ledger.ErrInvalidArgument, strings.Join(Schemes, ", "))
	}
	switch scheme {
	case SchemeRedis, SchemeRedisTLS:
		return newSingleClient(rawURL)
	case SchemeSentinel, SchemeSentinelTLS, SchemeCluster, SchemeClusterTLS:
		m, err := parseMulti(rawURL)
		if err != nil {
			return nil, urlParams{}, err
		}
		if m.cluster {
			o, err := m.clusterOptions()
			if err != nil {
				return nil, m.params, err
			}
			return goredis.NewClusterClient(o), m.params, nil
		}
		o, err := m.failoverOptions()
		if err != nil {
			return nil, m.params, err
		}
		return goredis.NewFailoverClient(o), m.params, nil
	default:
		return nil, urlParams{}, fmt.Errorf("%w: open redis ledger: scheme %q; want one of %s", ledger.ErrInvalidArgument, scheme, strings.Join(Schemes, ", "))
	}
}

// newSingleClient is redis:// and rediss://: go-redis parses the URL once
// the ledger's own parameters are taken out.
func newSingleClient(rawURL string) (goredis.UniversalClient, urlParams, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, urlParams{}, fmt.Errorf("open redis ledger: %w", err)
	}
	q := u.Query()
	p, err := takeParams(q, u.Redacted())
	if err != nil {
		return nil, p, err
	}
	u.RawQuery = q.Encode()
	copts, err := goredis.ParseURL(u.String())
	if err != nil {
		return nil, p, fmt.Errorf("open redis ledger %s: %w", u.Redacted(), err)
	}
	// Every call's deadline bounds its socket reads and writes too, so a
	// Redis that accepts connections and never answers holds a call no
	// longer than its context allows (go-redis otherwise waits out its
	// own 5s read timeout, and retries).
	copts.ContextTimeoutEnabled = true
	return goredis.NewClient(copts), p, nil
}

// multiURL is a parsed redis+sentinel:// or redis+cluster:// URL.
type multiURL struct {
	cluster bool
	tls     bool
	scheme  string
	hosts   []string
	user    *url.Userinfo // the data servers' credentials; nil: none
	master  string        // sentinel only
	db      int           // sentinel only
	// sentinelUser is the Sentinels' own credentials (sentinel_username,
	// sentinel_password); nil: none.
	sentinelUser *url.Userinfo
	params       urlParams
	// rest are go-redis's parameters.
	rest     url.Values
	redacted string
}

// refusedParams are go-redis parameters the ledger refuses, with why: each
// either names what the URL's own parts carry or routes commands away from
// the primary.
var refusedParams = map[string]string{
	"addr":                       "list every host before the path, comma-separated",
	"master_name":                "the master name is the URL's path",
	"username":                   "put the user in the URL's user info (user:password@)",
	"password":                   "put the password in the URL's user info (user:password@)",
	"read_only":                  "the ledger reads what it just wrote: replicas may lag",
	"replica_only":               "the ledger writes: it needs the primary",
	"route_by_latency":           "the ledger reads what it just wrote: replicas may lag",
	"route_randomly":             "the ledger reads what it just wrote: replicas may lag",
	"route_by_latency_tolerance": "the ledger reads what it just wrote: replicas may lag",
}

// parseMulti parses a redis+sentinel:// or redis+cluster:// URL (or its
// rediss+ form), naming the part at fault in every error.
func parseMulti(rawURL string) (*multiURL, error) {
	scheme, rest, _ := strings.Cut(rawURL, "://")
	m := &multiURL{scheme: scheme, cluster: strings.HasSuffix(scheme, "+cluster"), tls: strings.HasPrefix(scheme, "rediss")}
	form := sentinelForm
	if m.cluster {
		form = clusterForm
	}
	// The authority ends at the first '/' or '?'; the user info, if any,
	// before its last '@'. Hosts are split here: url.Parse takes one host.
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	userinfo, hostList := "", authority
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		userinfo, hostList = authority[:at+1], authority[at+1:]
	}
	// Parse the user info, path and query around a placeholder host.
	u, err := url.Parse("x://" + userinfo + "placeholder" + tail)
	if err != nil {
		return nil, fmt.Errorf("%w: open redis ledger %s://...: %v; want %s", ledger.ErrInvalidArgument, scheme, unwrapURLError(err), form)
	}
	m.user = u.User
	m.redacted = m.redact(hostList, u)
	bad := func(part, format string, args ...any) error {
		return fmt.Errorf("%w: open redis ledger %s: %s: %s; want %s", ledger.ErrInvalidArgument, m.redacted, part, fmt.Sprintf(format, args...), form)
	}
	if hostList == "" {
		return nil, bad("hosts", "none given")
	}
	hosts := strings.Split(hostList, ",")
	for i, h := range hosts {
		part := fmt.Sprintf("host %d of %d (%q)", i+1, len(hosts), h)
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			return nil, bad(part, "not host:port")
		}
		if host == "" {
			return nil, bad(part, "empty host")
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return nil, bad(part, "port %q is not a number in 1-65535", port)
		}
		m.hosts = append(m.hosts, net.JoinHostPort(host, port))
	}
	q := u.Query()
	m.params, err = takeParams(q, m.redacted)
	if err != nil {
		return nil, err
	}
	for name, why := range refusedParams {
		if q.Has(name) {
			return nil, bad("parameter "+name, "refused: %s", why)
		}
	}
	path := strings.TrimPrefix(u.Path, "/")
	if m.cluster {
		if path != "" {
			return nil, bad(fmt.Sprintf("path %q", u.Path), "a Redis Cluster has database 0 only and no master name: give no path")
		}
		if q.Has("db") {
			return nil, bad("parameter db", "a Redis Cluster has database 0 only")
		}
		for _, name := range []string{"sentinel_username", "sentinel_password"} {
			if q.Has(name) {
				return nil, bad("parameter "+name, "only for redis+sentinel://")
			}
		}
	} else {
		switch {
		case path == "":
			return nil, bad("master name", "missing (the URL's path)")
		case strings.Contains(path, "/"):
			return nil, bad(fmt.Sprintf("path %q", u.Path), "want one segment, the master name")
		}
		m.master = path
		if v := q.Get("db"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return nil, bad("parameter db", "%q is not a whole number >= 0", v)
			}
			m.db = n
		}
		q.Del("db")
		su, sp := q.Get("sentinel_username"), q.Get("sentinel_password")
		if su != "" && sp == "" {
			return nil, bad("parameter sentinel_username", "given without sentinel_password")
		}
		if sp != "" {
			m.sentinelUser = url.UserPassword(su, sp)
		}
		q.Del("sentinel_username")
		q.Del("sentinel_password")
	}
	if q.Has("skip_verify") && !m.tls {
		return nil, bad("parameter skip_verify", "only with TLS (%s)", strings.Replace(scheme, "redis+", "rediss+", 1))
	}
	m.rest = q
	return m, nil
}

// unwrapURLError drops url.Error's repetition of the URL (which would
// print the placeholder and the password).
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// redact returns the URL for errors: passwords masked as url.Redacted does.
func (m *multiURL) redact(hostList string, u *url.URL) string {
	var b strings.Builder
	b.WriteString(m.scheme + "://")
	if u.User != nil {
		b.WriteString(u.User.Username())
		if _, ok := u.User.Password(); ok {
			b.WriteString(":xxxxx")
		}
		b.WriteByte('@')
	}
	b.WriteString(hostList)
	b.WriteString(u.EscapedPath())
	if u.RawQuery != "" {
		q := u.Query()
		if q.Has("sentinel_password") {
			q.Set("sentinel_password", "xxxxx")
		}
		b.WriteString("?" + q.Encode())
	}
	return b.String()
}

// goURL is the URL go-redis's own parser reads: the first host, the other
// hosts as addr parameters, and extra on top of the remaining parameters.
func (m *multiURL) goURL(user *url.Userinfo, extra url.Values) string {
	q := url.Values{}
	for k, v := range m.rest {
		q[k] = v
	}
	for k, v := range extra {
		q[k] = v
	}
	for _, h := range m.hosts[1:] {
		q.Add("addr", h)
	}
	scheme := SchemeRedis
	if m.tls {
		scheme = SchemeRedisTLS
	}
	return (&url.URL{Scheme: scheme, User: user, Host: m.hosts[0], RawQuery: q.Encode()}).String()
}

// failoverOptions are the go-redis failover client's options: it asks the
// Sentinels for the primary of m.master and follows +switch-master.
func (m *multiURL) failoverOptions() (*goredis.FailoverOptions, error) {
	extra := url.Values{"master_name": {m.master}, "db": {strconv.Itoa(m.db)}}
	if m.user != nil {
		if name := m.user.Username(); name != "" {
			extra.Set("username", name)
		}
		if pw, ok := m.user.Password(); ok {
			extra.Set("password", pw)
		}
	}
	// go-redis reads the URL's user info as the Sentinels' credentials.
	o, err := goredis.ParseFailoverURL(m.goURL(m.sentinelUser, extra))
	if err != nil {
		return nil, fmt.Errorf("%w: open redis ledger %s: %v", ledger.ErrInvalidArgument, m.redacted, err)
	}
	o.ContextTimeoutEnabled = true
	if o.TLSConfig != nil {
		o.TLSConfig.ServerName = "" // each node by the address dialed
	}
	return o, nil
}

// clusterOptions are the go-redis cluster client's options, seeded with
// m.hosts: it maps slots to nodes and follows MOVED and ASK.
func (m *multiURL) clusterOptions() (*goredis.ClusterOptions, error) {
	o, err := goredis.ParseClusterURL(m.goURL(m.user, nil))
	if err != nil {
		return nil, fmt.Errorf("%w: open redis ledger %s: %v", ledger.ErrInvalidArgument, m.redacted, err)
	}
	o.ContextTimeoutEnabled = true
	if o.TLSConfig != nil {
		// Each node by the address dialed; TLS 1.2 at least, as rediss://.
		o.TLSConfig.ServerName = ""
		o.TLSConfig.MinVersion = max(o.TLSConfig.MinVersion, tls.VersionTLS12)
	}
	return o, nil
}
