package tenancy

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"sort"
	"strings"
)

// hashPrefix starts every token hash in the config.
const hashPrefix = "sha256:"

// HashToken is the form a token takes in the config: "sha256:" and the hex
// SHA-256 of the token.
//
// Why a plain SHA-256 and not bcrypt or argon2? The tokens are 256-bit
// random strings (sluice token new), not passwords: nobody can search their
// space, so a slow hash buys nothing and would cost every request.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hashPrefix + hex.EncodeToString(sum[:])
}

// tokenID is how a token is named where the token itself must not be:
// "sha256:" and the first 12 hex digits of its hash (in the HashToken form).
func tokenID(hash string) string {
	return hash[:len(hashPrefix)+12]
}

// Principal is who a token belongs to: the admin, or a tenant.
type Principal struct {
	// Tenant is the tenant's id; empty for the admin.
	Tenant string
	// Admin manages every tenant.
	Admin bool
	// TokenID names the token in the audit log and the manifest: "sha256:"
	// and the first 12 hex digits of its hash. Never the token itself.
	TokenID string
}

// String is how the principal appears in the manifest's uploaded_by and
// activation records: "admin (sha256:…)" or "tenant acme (sha256:…)".
func (p Principal) String() string {
	if p.Admin {
		return "admin (" + p.TokenID + ")"
	}
	return "tenant " + p.Tenant + " (" + p.TokenID + ")"
}

// actor is the principal's name in audit records: "admin" or the tenant.
func (p Principal) actor() string {
	if p.Admin {
		return "admin"
	}
	return p.Tenant
}

// Auth maps bearer tokens to principals by their hashes. It is immutable and
// safe for concurrent use.
type Auth struct {
	entries []authEntry
}

type authEntry struct {
	hash      [sha256.Size]byte
	principal Principal
}

// NewAuth builds an Auth from the admin token hashes and each tenant's
// token hashes, all in the HashToken form. It refuses a malformed hash, an
// empty tenant id and a hash given twice, naming the entry.
func NewAuth(adminHashes []string, tenantHashes map[string][]string) (*Auth, error) {
	a := &Auth{}
	seen := map[[sha256.Size]byte]string{}
	add := func(where, h string, p Principal) error {
		sum, err := parseTokenHash(h)
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if other, dup := seen[sum]; dup {
			return fmt.Errorf("%s: the same token hash is also %s; give each token one owner", where, other)
		}
		seen[sum] = where
		p.TokenID = tokenID(h)
		a.entries = append(a.entries, authEntry{hash: sum, principal: p})
		return nil
	}
	for i, h := range adminHashes {
		if err := add(fmt.Sprintf("admin token %d", i), h, Principal{Admin: true}); err != nil {
			return nil, err
		}
	}
	tenants := make([]string, 0, len(tenantHashes))
	for t := range tenantHashes {
		tenants = append(tenants, t)
	}
	sort.Strings(tenants) // errors name the same entry every run
	for _, t := range tenants {
		if err := ValidName(t); err != nil {
			return nil, fmt.Errorf("tenant %q: %w", t, err)
		}
		for i, h := range tenantHashes[t] {
			if err := add(fmt.Sprintf("tenant %s token %d", t, i), h, Principal{Tenant: t}); err != nil {
				return nil, err
			}
		}
	}
	return a, nil
}

// parseTokenHash decodes "sha256:<64 hex digits>".
func parseTokenHash(h string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	hexPart, ok := strings.CutPrefix(h, hashPrefix)
	if !ok || !isSHA256(hexPart) {
		return sum, fmt.Errorf("%q is not a token hash: want sha256: and 64 lowercase hex digits (sluice token hash)", abbreviate(h, 80))
	}
	_, _ = hex.Decode(sum[:], []byte(hexPart))
	return sum, nil
}

// Identify returns the principal whose token this is. It compares the
// token's hash with every configured hash in constant time and never stops
// early, so the time taken says nothing about which hash, if any, matched.
func (a *Auth) Identify(token string) (Principal, bool) {
	if token == "" {
		return Principal{}, false
	}
	sum := sha256.Sum256([]byte(token))
	match := -1
	for i := range a.entries {
		eq := subtle.ConstantTimeCompare(sum[:], a.entries[i].hash[:])
		match = subtle.ConstantTimeSelect(eq, i, match)
	}
	if match < 0 {
		return Principal{}, false
	}
	return a.entries[match].principal, true
}

// BearerToken is the token of an "Authorization: Bearer <token>" header,
// empty if there is none or more than one Authorization header.
func BearerToken(r *http.Request) string {
	h := r.Header.Values("Authorization")
	if len(h) != 1 {
		return ""
	}
	scheme, token, ok := strings.Cut(h[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// isSHA256 reports whether s is 64 lowercase hex digits.
func isSHA256(s string) bool {
	return len(s) == 2*sha256.Size && isLowerHex(s)
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ValidName checks a tenant id or pipeline name: 1 to 64 letters, digits,
// '_', '-' or '.', starting with a letter or digit. The engine's config
// validation uses it too, so that every configured name can reach the API.
func ValidName(s string) error {
	if s == "" || len(s) > 64 {
		return fmt.Errorf("want 1 to 64 characters, got %d", len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case (c == '_' || c == '-' || c == '.') && i > 0:
		default:
			return fmt.Errorf("%q: only letters, digits, '_', '-' and '.' (not first) are allowed", abbreviate(s, 80))
		}
	}
	return nil
}

// abbreviate cuts s to at most n bytes for an error message.
func abbreviate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
