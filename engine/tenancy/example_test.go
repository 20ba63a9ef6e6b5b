package tenancy_test

import (
	"fmt"

	"github.com/sluicehq/sluice/engine/tenancy"
)

// The config holds the hash of each token; the server compares the hash of
// the presented token with them.
func ExampleHashToken() {
	hash := tenancy.HashToken("secret")
	auth, err := tenancy.NewAuth(nil, map[string][]string{"acme": {hash}})
	if err != nil {
		panic(err)
	}
	p, ok := auth.Identify("secret")
	fmt.Println(hash)
	fmt.Println(p.Tenant, p.Admin, ok, p)
	// Output:
	// sha256:2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b
	// acme false true tenant acme (sha256:2bb80d537b1d)
}
