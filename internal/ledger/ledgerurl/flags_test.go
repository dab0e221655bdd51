package ledgerurl

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/ledger/remote"
)

// TestFlagErrorNamesTheFlag: a TLS file remote.Dial cannot read or parse
// is reported under the flag that named it, anything else under --ledger.
func TestFlagErrorNamesTheFlag(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing.pem")
	for _, tc := range []struct {
		name string
		cfg  Client
		want string
	}{
		{"CA file", Client{CAFile: missing}, `--ledger-ca-file = "` + missing + `"`},
		{"cert file", Client{CertFile: missing, KeyFile: missing}, `--ledger-cert-file = "` + missing + `"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := remote.Dial("grpc://127.0.0.1:1", tc.cfg.RemoteOptions())
			err = FlagError(err)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, os.ErrNotExist) {
				t.Errorf("FlagError = %v, want one naming %s and matching os.ErrNotExist", err, tc.want)
			}
		})
	}
	if err := FlagError(errors.New("boom")); err.Error() != "--ledger: boom" {
		t.Errorf("FlagError(boom) = %v, want --ledger: boom", err)
	}
}
