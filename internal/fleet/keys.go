package fleet

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/leasehold/leasehold/internal/ledger"
)

// KeyHash is the SHA-256 of an API key.
type KeyHash [sha256.Size]byte

// String formats h as in the fleet file, "sha256:<hex>".
func (h KeyHash) String() string { return hashPrefix + hex.EncodeToString(h[:]) }

const hashPrefix = "sha256:"

// HashAPIKey returns the hash of a plaintext key.
func HashAPIKey(key string) KeyHash { return sha256.Sum256([]byte(key)) }

// ParseAPIKey reads a fleet-file api_keys entry: "sha256:<64 hex digits>",
// or a plaintext key, which is hashed. Errors never echo the key.
func ParseAPIKey(s string) (KeyHash, error) {
	if hexPart, ok := strings.CutPrefix(s, hashPrefix); ok {
		var h KeyHash
		b, err := hex.DecodeString(hexPart)
		if err != nil || len(b) != len(h) {
			return KeyHash{}, errors.New(`must be "sha256:" followed by 64 hex digits, or a plaintext key`)
		}
		copy(h[:], b)
		return h, nil
	}
	if s == "" {
		return KeyHash{}, errors.New("must not be empty")
	}
	if strings.TrimSpace(s) != s {
		return KeyHash{}, errors.New("has leading or trailing whitespace")
	}
	return HashAPIKey(s), nil
}

// TenantForKey returns the tenant a bearer key belongs to. It compares the
// key's hash with every configured hash in constant time, without stopping
// at a match, so timing reveals neither which key matched nor how far.
func (f *Fleet) TenantForKey(key string) (ledger.TenantID, bool) {
	h := HashAPIKey(key)
	var found ledger.TenantID
	match := 0
	for _, t := range f.Tenants {
		for _, k := range t.APIKeys {
			eq := subtle.ConstantTimeCompare(h[:], k[:])
			if eq == 1 {
				found = t.Name
			}
			match |= eq
		}
	}
	if key == "" || match == 0 {
		return "", false
	}
	return found, true
}
