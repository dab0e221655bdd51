package remote

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/testutil/testpki"
)

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"grpc://127.0.0.1:7070", "127.0.0.1:7070", ""},
		{"grpc://reserver.internal:7070/", "reserver.internal:7070", ""},
		{"grpc://[::1]:7070", "[::1]:7070", ""},
		{"redis://127.0.0.1:6379", "", "scheme"},
		{"grpc://127.0.0.1", "", "want grpc://host:port"},
		{"grpc://host:1/path", "", "want grpc://host:port"},
		{"grpc://u:p@host:1", "", "want grpc://host:port"},
		{"127.0.0.1:7070", "", "ledger URL"},
	} {
		got, err := ParseTarget(tc.in)
		if tc.err == "" && (err != nil || got != tc.want) {
			t.Errorf("ParseTarget(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
		if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("ParseTarget(%q) error = %v, want one containing %q", tc.in, err, tc.err)
		}
	}
	if _, err := Dial("grpc://127.0.0.1:1", Options{CertFile: "x"}); err == nil {
		t.Errorf("Dial with a cert file and no key file succeeded")
	}
	if _, err := Dial("grpc://127.0.0.1:1", Options{CAFile: filepath.Join(t.TempDir(), "missing.pem")}); err == nil {
		t.Errorf("Dial with a missing CA file succeeded")
	}
}

// TestDialTLSFiles: a TLS file that is missing or does not parse fails
// Dial, not the first call, with a *FileError naming the option at fault.
func TestDialTLSFiles(t *testing.T) {
	ca := testpki.New(t, "ca")
	cert, key, _ := ca.Client(t, "client")
	_, otherKey, _ := ca.Client(t, "other")
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not PEM\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		opts       Options
		wantOption string
		wantPath   string
	}{
		{"missing CA file", Options{CAFile: missing}, OptionCAFile, missing},
		{"CA file without PEM", Options{CAFile: garbage}, OptionCAFile, garbage},
		{"missing cert file", Options{CertFile: missing, KeyFile: key}, OptionCertFile, missing},
		{"cert file without PEM", Options{CertFile: garbage, KeyFile: key}, OptionCertFile, garbage},
		{"key file as cert file", Options{CertFile: key, KeyFile: key}, OptionCertFile, key},
		{"missing key file", Options{CertFile: cert, KeyFile: missing}, OptionKeyFile, missing},
		{"key file without PEM", Options{CertFile: cert, KeyFile: garbage}, OptionKeyFile, garbage},
		{"key of another certificate", Options{CertFile: cert, KeyFile: otherKey}, OptionKeyFile, otherKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Dial("grpc://127.0.0.1:1", tc.opts)
			if err == nil {
				_ = c.Close()
				t.Fatalf("Dial succeeded, want a *FileError for %s", tc.wantOption)
			}
			var fe *FileError
			if !errors.As(err, &fe) || fe.Option != tc.wantOption || fe.Path != tc.wantPath {
				t.Errorf("Dial error = %v (%#v), want a *FileError for %s %s", err, fe, tc.wantOption, tc.wantPath)
			}
		})
	}
	c, err := Dial("grpc://127.0.0.1:1", Options{CAFile: ca.File, CertFile: cert, KeyFile: key})
	if err != nil {
		t.Fatalf("Dial with good files: %v", err)
	}
	_ = c.Close()
}
