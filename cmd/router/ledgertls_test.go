package main

import (
	"io"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/ledger/remote"
	"github.com/leasehold/leasehold/internal/route"
)

// TestLedgerTLSFlags: the --ledger-* TLS flags (or their LEASEHOLD_*
// variables) reach remote.Options (through ledgerClient and ledgerurl),
// apply to grpc:// ledgers only, and a client certificate needs its key;
// every refusal names the flag.
func TestLedgerTLSFlags(t *testing.T) {
	base := []string{"--config", "f.yaml", "--id", "r1"}
	grpc := []string{"--ledger", "grpc://reserver.internal:7400"}
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    remote.Options // when wantErr is empty
		wantErr []string
	}{
		{name: "plaintext by default", args: grpc},
		{name: "system roots", args: append([]string{"--ledger-tls"}, grpc...), want: remote.Options{TLS: true}},
		{name: "mTLS", args: append([]string{"--ledger-ca-file", "ca.pem", "--ledger-cert-file", "r1.pem", "--ledger-key-file", "r1-key.pem",
			"--ledger-server-name", "reserver"}, grpc...),
			want: remote.Options{CAFile: "ca.pem", CertFile: "r1.pem", KeyFile: "r1-key.pem", ServerName: "reserver"}},
		{name: "from the environment", args: grpc,
			env: map[string]string{"LEASEHOLD_LEDGER_TLS": "true", "LEASEHOLD_LEDGER_CA_FILE": "ca.pem", "LEASEHOLD_LEDGER_CERT_FILE": "r1.pem",
				"LEASEHOLD_LEDGER_KEY_FILE": "r1-key.pem", "LEASEHOLD_LEDGER_SERVER_NAME": "reserver"},
			want: remote.Options{TLS: true, CAFile: "ca.pem", CertFile: "r1.pem", KeyFile: "r1-key.pem", ServerName: "reserver"}},
		{name: "cert without key", args: append([]string{"--ledger-cert-file", "r1.pem"}, grpc...),
			wantErr: []string{"--ledger-key-file: required with --ledger-cert-file"}},
		{name: "key without cert", args: append([]string{"--ledger-key-file", "r1-key.pem"}, grpc...),
			wantErr: []string{"--ledger-cert-file: required with --ledger-key-file"}},
		{name: "tls with memory", args: []string{"--ledger", "memory://", "--ledger-tls"},
			wantErr: []string{`--ledger-tls: applies to a grpc:// --ledger (a reserver) only, not --ledger = "memory://"`}},
		{name: "every flag with redis", args: []string{"--ledger", "rediss://r:6379/0", "--ledger-tls", "--ledger-ca-file", "ca.pem",
			"--ledger-cert-file", "c.pem", "--ledger-key-file", "k.pem", "--ledger-server-name", "x"},
			wantErr: []string{"--ledger-tls:", "--ledger-ca-file:", "--ledger-cert-file:", "--ledger-key-file:", "--ledger-server-name:"}},
		{name: "ca file with etcd from the environment", args: []string{"--ledger", "etcd://e:2379"},
			env: map[string]string{"LEASEHOLD_LEDGER_CA_FILE": "ca.pem"}, wantErr: []string{"--ledger-ca-file: applies to a grpc://"}},
		{name: "local admission without a ledger", args: []string{"--admission", "local", "--ledger-tls"},
			wantErr: []string{`--ledger-tls: applies to a grpc:// --ledger (a reserver) only, not --ledger = ""`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
			c, err := route.ParseFlags(append(append([]string(nil), base...), tc.args...), lookup, io.Discard)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("ParseFlags: %v", err)
				}
				want := tc.want
				want.Token = "tok"
				if got := ledgerClient(&c, "tok").RemoteOptions(); !remoteOptionsEqual(got, want) {
					t.Errorf("RemoteOptions = %+v, want %+v", got, want)
				}
				return
			}
			for _, w := range tc.wantErr {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("ParseFlags error = %v, want it to contain %q", err, w)
				}
			}
		})
	}
	var help strings.Builder
	_, _ = route.ParseFlags([]string{"--help"}, func(string) (string, bool) { return "", false }, &help)
	for _, f := range []string{"-ledger-tls", "-ledger-ca-file", "-ledger-cert-file", "-ledger-key-file", "-ledger-server-name"} {
		if !strings.Contains(help.String(), f) {
			t.Errorf("--help does not list %s", f)
		}
	}
}

func remoteOptionsEqual(a, b remote.Options) bool {
	return a.Token == b.Token && a.TLS == b.TLS && a.CAFile == b.CAFile && a.CertFile == b.CertFile &&
		a.KeyFile == b.KeyFile && a.ServerName == b.ServerName
}
