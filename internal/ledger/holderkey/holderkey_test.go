package holderkey_test

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/internal/ledger"
	"github.com/leasehold/leasehold/internal/ledger/holderkey"
	"github.com/leasehold/leasehold/internal/testutil/syncbuf"
)

func TestVerify(t *testing.T) {
	k, other := holderkey.New(), holderkey.New()
	own := ledger.HolderID("router-a/" + k.Suffix())
	for _, tc := range []struct {
		name     string
		holder   ledger.HolderID
		key      holderkey.Key
		wantName string // "" means refused
	}{
		{"own holder", own, k, "router-a"},
		{"own tag without a nonce", ledger.HolderID("r/" + k.Tag()), k, "r"},
		{"name with a slash", ledger.HolderID("ns/r/" + k.Suffix()), k, "ns/r"},
		{"another key's holder", ledger.HolderID("router-a/" + other.Suffix()), k, ""},
		{"the zero key", own, holderkey.Key{}, ""},
		{"random suffix", "router-a/0123456789abcdef", k, ""},
		{"no suffix", "router-a", k, ""},
		{"empty name", ledger.HolderID("/" + k.Suffix()), k, ""},
		{"tag then junk without a dot", ledger.HolderID("r/" + k.Tag() + "x"), k, ""},
		{"a prefix of the tag", ledger.HolderID("r/" + k.Tag()[:holderkey.TagLen/2]), k, ""},
		{"empty", "", k, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name, err := holderkey.Verify(tc.holder, tc.key)
			if tc.wantName == "" {
				if !errors.Is(err, holderkey.ErrNotDerived) {
					t.Errorf("Verify(%q) = %q, %v; want ErrNotDerived", tc.holder, name, err)
				}
				return
			}
			if err != nil || name != tc.wantName {
				t.Errorf("Verify(%q) = %q, %v; want %q", tc.holder, name, err, tc.wantName)
			}
		})
	}
}

func TestSuffixFreshAndBounded(t *testing.T) {
	k := holderkey.New()
	a, b := k.Suffix(), k.Suffix()
	if a == b {
		t.Errorf("two Suffix calls gave %q twice; want a fresh nonce each", a)
	}
	if len(a) != holderkey.SuffixLen || !strings.HasPrefix(a, k.Tag()+".") {
		t.Errorf("Suffix = %q (%d bytes); want tag %q, '.', nonce: %d bytes", a, len(a), k.Tag(), holderkey.SuffixLen)
	}
	if k.Tag() == holderkey.New().Tag() {
		t.Errorf("two keys share a tag")
	}
}

func TestParse(t *testing.T) {
	k := holderkey.New()
	for _, tc := range []struct {
		name string
		in   string
		ok   bool
	}{
		{"encoded", k.Encode(), true},
		{"upper case", strings.ToUpper(k.Encode()), true},
		{"short", k.Encode()[:10], false},
		{"long", k.Encode() + "00", false},
		{"not hex", strings.Repeat("zz", holderkey.Size), false},
		{"empty", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := holderkey.Parse(tc.in)
			if !tc.ok {
				if !errors.Is(err, holderkey.ErrMalformed) {
					t.Errorf("Parse = %v; want ErrMalformed", err)
				}
				if tc.in != "" && strings.Contains(fmt.Sprint(err), tc.in) {
					t.Errorf("error %q quotes the input", err)
				}
				return
			}
			if err != nil || got != k {
				t.Errorf("Parse(Encode()) = %v, %v; want the key back", got == k, err)
			}
		})
	}
}

// TestNeverPrinted: every way a key reaches a log or a message prints no
// key bytes.
func TestNeverPrinted(t *testing.T) {
	k := holderkey.New()
	secret := k.Encode()
	var buf syncbuf.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	log.Info("x", "key", k, "in", struct{ K holderkey.Key }{k})
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("x", "key", k, "in", struct{ K holderkey.Key }{k})
	for _, s := range []string{
		fmt.Sprint(k), fmt.Sprintf("%v %+v %#v %x %X %s %q %d", k, k, k, k, k, k, k, k),
		fmt.Sprintf("%v %+v %#v", struct{ K holderkey.Key }{k}, &struct{ K holderkey.Key }{k}, []holderkey.Key{k}),
		buf.String(),
	} {
		if strings.Contains(strings.ToLower(s), secret[:16]) {
			t.Errorf("printed form %q contains the key", s)
		}
	}
}
