package tenancy

import (
	"net/http"
	"strings"
	"testing"
)

func TestHashToken(t *testing.T) {
	// sha256("secret"), computed independently.
	const want = "sha256:2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b"
	if got := HashToken("secret"); got != want {
		t.Fatalf("HashToken(secret) = %s, want %s", got, want)
	}
}

func TestNewAuthRefuses(t *testing.T) {
	good := HashToken("a")
	for _, tc := range []struct {
		name    string
		admin   []string
		tenants map[string][]string
		want    string
	}{
		{"no prefix", []string{strings.TrimPrefix(good, "sha256:")}, nil, "admin token 0"},
		{"short", []string{"sha256:abcd"}, nil, "is not a token hash"},
		{"upper case", []string{strings.ToUpper(good)}, nil, "is not a token hash"},
		{"tenant bad hash", nil, map[string][]string{"acme": {good, "md5:x"}}, "tenant acme token 1"},
		{"bad tenant id", nil, map[string][]string{"a/b": {good}}, `tenant "a/b"`},
		{"shared hash", []string{good}, map[string][]string{"acme": {good}}, "also admin token 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewAuth(tc.admin, tc.tenants)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewAuth error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestIdentify(t *testing.T) {
	a, err := NewAuth([]string{HashToken("root")}, map[string][]string{
		"acme":   {HashToken("acme-1"), HashToken("acme-2")},
		"globex": {HashToken("globex-1")},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		token  string
		ok     bool
		tenant string
		admin  bool
	}{
		{"root", true, "", true},
		{"acme-1", true, "acme", false},
		{"acme-2", true, "acme", false},
		{"globex-1", true, "globex", false},
		{"", false, "", false},
		{"acme", false, "", false},
		{HashToken("root"), false, "", false}, // the hash is not the token
	} {
		p, ok := a.Identify(tc.token)
		if ok != tc.ok || p.Tenant != tc.tenant || p.Admin != tc.admin {
			t.Errorf("Identify(%q) = %+v, %v; want tenant %q admin %v ok %v", tc.token, p, ok, tc.tenant, tc.admin, tc.ok)
		}
		if ok && p.TokenID != HashToken(tc.token)[:19] {
			t.Errorf("Identify(%q).TokenID = %q, want the hash's first 12 hex digits", tc.token, p.TokenID)
		}
	}
}

func TestBearerToken(t *testing.T) {
	for header, want := range map[string]string{
		"Bearer abc":   "abc",
		"bearer  abc ": "abc",
		"Basic abc":    "",
		"Bearer":       "",
		"":             "",
	} {
		r, _ := http.NewRequest("GET", "/", nil)
		if header != "" {
			r.Header.Set("Authorization", header)
		}
		if got := BearerToken(r); got != want {
			t.Errorf("BearerToken(%q) = %q, want %q", header, got, want)
		}
	}
	r, _ := http.NewRequest("GET", "/", nil)
	r.Header.Add("Authorization", "Bearer abc")
	r.Header.Add("Authorization", "Bearer def")
	if got := BearerToken(r); got != "" {
		t.Errorf("BearerToken of two headers = %q, want none", got)
	}
}

func TestValidName(t *testing.T) {
	for _, ok := range []string{"acme", "a", "logs-2.v1_x", strings.Repeat("a", 64)} {
		if err := ValidName(ok); err != nil {
			t.Errorf("ValidName(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-x", ".x", "a/b", "a b", "ä", strings.Repeat("a", 65), ".."} {
		if err := ValidName(bad); err == nil {
			t.Errorf("ValidName(%q) accepted it", bad)
		}
	}
}
