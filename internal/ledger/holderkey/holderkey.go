// Package holderkey is a router's holder key: a per-process secret that
// proves to a reserver that a holder id belongs to the caller's own
// session, without the reserver keeping any state.
//
// A router draws one Key (32 random bytes) at start. Every holder id it
// uses is "<name>/<tag>.<nonce>": tag is the first TagLen hex digits of
// SHA-256(domain || key) and nonce is random, fresh per holder incarnation.
// The grpc:// backend (internal/ledger/remote) sends the key with every
// holder-scoped call as metadata MetadataKey; the reserver (package rpc)
// recomputes the tag from the key presented and refuses a router whose
// holder id does not carry it. Holder ids are public (List, the audit)
// but the tag does not reveal the key, so no other caller can act for a
// session's holders: not another router, not one with the same token.
// Because the check needs only the key and the holder id, every reserver
// in front of one store agrees without sharing anything.
//
// # Hazards
//
// The key is a bearer secret for the session's leases: whoever has it
// (and a router credential) can release them. It crosses the network with
// every holder call, in the clear on a plaintext link, like the bearer
// token; serve TLS wherever the path is not trusted. Key's formatting
// methods print no key bytes, so logging a Key or a struct holding one is
// safe; Encode is the only way to the secret, for the wire.
package holderkey

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/leasehold/leasehold/internal/ledger"
)

const (
	// Size is a key's length in bytes.
	Size = 32
	// TagLen is the length in hex digits of the tag derived from a key.
	TagLen = 32
	// NonceLen is the length in hex digits of a holder incarnation's nonce.
	NonceLen = 16
	// SuffixLen is the length of what Suffix returns: tag, '.', nonce.
	SuffixLen = TagLen + 1 + NonceLen
	// MetadataKey is the gRPC metadata that carries a key, hex-encoded.
	MetadataKey = "x-leasehold-holder-key"
)

// domain separates the tag's hash from any other use of the key.
const domain = "leasehold holder key v1\x00"

// Errors of Parse and Verify, matched with errors.Is. Their messages never
// contain a key.
var (
	// ErrMalformed: the presented key is not 2*Size hex digits.
	ErrMalformed = errors.New("holderkey: malformed key")
	// ErrNotDerived: the holder id does not carry the key's tag.
	ErrNotDerived = errors.New("holderkey: holder id not derived from the key")
)

// Key is a holder key. The zero Key is "none" (IsZero); New draws a real
// one. Comparable, and safe to copy.
type Key struct{ b [Size]byte }

// Keyed is implemented by ledgers that present a holder key to their
// server (the grpc:// backend): a lease.Manager on such a ledger derives
// its holder ids from that key.
type Keyed interface {
	HolderKey() Key
}

// New returns a fresh random key.
func New() Key {
	var k Key
	_, _ = rand.Read(k.b[:]) // crypto/rand.Read never fails
	return k
}

// IsZero reports whether k is the zero Key.
func (k Key) IsZero() bool { return k == Key{} }

// Tag is the public part of k that holder ids carry: TagLen hex digits of
// SHA-256(domain || k).
func (k Key) Tag() string {
	h := sha256.New()
	h.Write([]byte(domain))
	h.Write(k.b[:])
	return hex.EncodeToString(h.Sum(nil))[:TagLen]
}

// Suffix returns a fresh holder-id suffix derived from k: its tag, '.',
// and NonceLen random hex digits, so each call names a new incarnation.
func (k Key) Suffix() string {
	var n [NonceLen / 2]byte
	_, _ = rand.Read(n[:])
	return k.Tag() + "." + hex.EncodeToString(n[:])
}

// Encode returns k as 2*Size lowercase hex digits, the form MetadataKey
// carries. It is the only method that reveals the key.
func (k Key) Encode() string { return hex.EncodeToString(k.b[:]) }

// Parse decodes what Encode returns (either case). Errors match
// ErrMalformed and do not quote s.
func Parse(s string) (Key, error) {
	var k Key
	if len(s) != 2*Size {
		return Key{}, fmt.Errorf("%w: %d characters, want %d hex digits", ErrMalformed, len(s), 2*Size)
	}
	if _, err := hex.Decode(k.b[:], []byte(s)); err != nil {
		return Key{}, fmt.Errorf("%w: not hex", ErrMalformed)
	}
	return k, nil
}

// Verify checks that holder is "<name>/<suffix>" with a non-empty name and
// a suffix that is k's tag, or k's tag followed by '.' and anything (the
// nonce), and returns name. The tag is compared in constant time. Errors
// match ErrNotDerived; they quote the holder id (public), never the key.
func Verify(holder ledger.HolderID, k Key) (string, error) {
	h := string(holder)
	i := strings.LastIndexByte(h, '/')
	if i <= 0 {
		return "", fmt.Errorf("%w: holder %q is not NAME/SUFFIX", ErrNotDerived, h)
	}
	name, suffix := h[:i], h[i+1:]
	shaped := len(suffix) == TagLen || len(suffix) > TagLen && suffix[TagLen] == '.'
	if !shaped || subtle.ConstantTimeCompare([]byte(suffix[:TagLen]), []byte(k.Tag())) != 1 {
		return "", fmt.Errorf("%w: holder %q does not carry the tag of the key presented", ErrNotDerived, h)
	}
	return name, nil
}

// String, GoString, Format and LogValue print no key bytes, so a Key that
// reaches a log or an error message reveals nothing.
func (k Key) String() string { return "holderkey.Key(redacted)" }

// GoString implements fmt.GoStringer; see String.
func (k Key) GoString() string { return k.String() }

// Format implements fmt.Formatter for every verb; see String.
func (k Key) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(k.String())) }

// LogValue implements slog.LogValuer; see String.
func (k Key) LogValue() slog.Value { return slog.StringValue(k.String()) }
