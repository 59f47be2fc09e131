package policy

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
)

// keyring maps the digest of every configured key to its tenant. A
// presented key is hashed before it is looked up, and the digest found is
// compared again in constant time, so the time a lookup takes tells
// nothing about the configured keys.
type keyring map[[32]byte]keyEntry

type keyEntry struct {
	digest [32]byte
	tenant string
}

func newKeyring(tenants map[string]Tenant) keyring {
	k := keyring{}
	for name, t := range tenants {
		for _, key := range t.APIKeys {
			if d, err := keyDigest(key); err == nil { // Validate refused the others
				k[d] = keyEntry{digest: d, tenant: name}
			}
		}
	}
	return k
}

// Identity is who a request comes from.
type Identity struct {
	// Tenant names it: a configured tenant, "key-" and 12 hex digits of
	// the SHA-256 of an unknown key (never the key), or "anonymous".
	Tenant string
	// Known is set when the key belongs to a configured tenant.
	Known bool
}

const anonymous = "anonymous"

// bearerKey returns the key of an Authorization header value: the part
// after "Bearer " (the scheme in any case), trimmed.
func bearerKey(h []byte) []byte {
	if len(h) < 7 || !asciiEqualFold(h[:7], "bearer ") {
		return nil
	}
	k := h[7:]
	for len(k) > 0 && (k[0] == ' ' || k[0] == '\t') {
		k = k[1:]
	}
	for len(k) > 0 && (k[len(k)-1] == ' ' || k[len(k)-1] == '\t') {
		k = k[:len(k)-1]
	}
	return k
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// identify names the tenant of an Authorization header value.
func (k keyring) identify(authorization []byte) Identity {
	key := bearerKey(authorization)
	if len(key) == 0 {
		return Identity{Tenant: anonymous}
	}
	if len(key) > maxKeyBytes {
		key = key[:maxKeyBytes] // no configured key is longer: it cannot match
	}
	d := sha256.Sum256(key)
	if e, ok := k[d]; ok && subtle.ConstantTimeCompare(e.digest[:], d[:]) == 1 {
		return Identity{Tenant: e.tenant, Known: true}
	}
	var b [16]byte
	copy(b[:4], "key-")
	hex.Encode(b[4:], d[:6])
	return Identity{Tenant: string(b[:])}
}

// KeyMatches reports whether an Authorization header value carries the key
// whose SHA-256 is want (ParseKey), comparing digests in constant time.
func KeyMatches(want [32]byte, authorization []byte) bool {
	key := bearerKey(authorization)
	if len(key) == 0 || len(key) > maxKeyBytes {
		return false
	}
	d := sha256.Sum256(key)
	return subtle.ConstantTimeCompare(d[:], want[:]) == 1
}
