package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/engine/tenancy"
)

const clientUsage = `Usage:
  sluice module push [flags] m.wasm [-note text] [-activate [-sample records.jsonl]]
  sluice module ls [flags] [-json]
  sluice module activate [flags] SHA256 [-sample records.jsonl]
  sluice module rollback [flags]
  sluice module rm [flags] SHA256

These talk to a sluice server's admin API. Flags (each may also come after
the arguments):
  -server URL        the admin API, e.g. https://sluice:9470 (default $SLUICE_SERVER)
  -token-file path   file holding the token
  -token token       the token; visible to other users in the process list,
                     so prefer -token-file, $SLUICE_TOKEN or $SLUICE_TOKEN_FILE
                     (the first of -token, -token-file, $SLUICE_TOKEN and
                     $SLUICE_TOKEN_FILE that is set is used)
  -tenant id         default: the token's tenant
  -pipeline name     default: the tenant's pipeline, if it has only one
  -ca file           PEM certificates to trust for https (default: the system's)
  -timeout d         bound on the whole command (default 2m)

push uploads a module; -activate then activates it. activate validates a
version (a sha256 or a unique prefix of at least 8 hex digits) against the
pipeline's tables, dry-running it on -sample's records (the format of
sluice module test -input) if given, and swaps it in. rollback returns to
the version active before. rm deletes an inactive version. ls lists the
versions, the active one marked *.

Exit status: 0 done, 1 refused or failed (the server's reason is printed),
2 bad usage.
`

const tokenUsage = `Usage:
  sluice token new           print a new random token and its hash
  sluice token hash < file   print the hash of the token on standard input

The config holds token hashes (admin.admin_tokens, tenants[].tokens), never
tokens: give the token to its holder and put its hash in the config.
`

// tokenInput is where sluice token hash reads; tests replace it.
var tokenInput io.Reader = os.Stdin

// clientFlags are the flags every admin API command takes.
type clientFlags struct {
	server, token, tokenFile string
	tenant, pipeline, ca     string
	timeout                  time.Duration
}

func (f *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.server, "server", os.Getenv("SLUICE_SERVER"), "admin API URL")
	fs.StringVar(&f.token, "token", "", "API token (prefer $SLUICE_TOKEN or -token-file)")
	fs.StringVar(&f.tokenFile, "token-file", "", "file holding the API token")
	fs.StringVar(&f.tenant, "tenant", "", "tenant (default: the token's)")
	fs.StringVar(&f.pipeline, "pipeline", "", "pipeline (default: the tenant's only one)")
	fs.StringVar(&f.ca, "ca", "", "PEM file of certificates to trust")
	fs.DurationVar(&f.timeout, "timeout", 2*time.Minute, "bound on the whole command")
}

// cmdModuleClient runs "sluice module push|ls|activate|rollback|rm".
func cmdModuleClient(verb string, args []string, stdout, stderr io.Writer) int {
	name := "sluice module " + verb
	fs := flag.NewFlagSet("module "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, clientUsage) }
	var cf clientFlags
	cf.register(fs)
	var note, samplePath string
	var activate, asJSON bool
	wantArgs := 0
	switch verb {
	case "push":
		fs.StringVar(&note, "note", "", "a note kept with the version")
		fs.BoolVar(&activate, "activate", false, "activate the module once uploaded")
		fs.StringVar(&samplePath, "sample", "", "records to dry-run the module on at activation (JSON lines)")
		wantArgs = 1
	case "activate":
		fs.StringVar(&samplePath, "sample", "", "records to dry-run the module on (JSON lines)")
		wantArgs = 1
	case "rm":
		wantArgs = 1
	case "ls":
		fs.BoolVar(&asJSON, "json", false, "print the server's JSON answer")
	case "rollback":
	default:
		fmt.Fprintf(stderr, "%s: unknown command\n\n%s", name, clientUsage)
		return 2
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return 2
	}
	if len(pos) != wantArgs {
		fmt.Fprintf(stderr, "%s: want %d argument(s), got %d\n\n%s", name, wantArgs, len(pos), clientUsage)
		return 2
	}
	if verb == "push" && samplePath != "" && !activate {
		fmt.Fprintf(stderr, "%s: -sample goes with -activate\n", name)
		return 2
	}
	c, err := newAPIClient(cf, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), cf.timeout)
	defer cancel()
	fail := func(err error) int {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	var sample []byte
	if samplePath != "" {
		if sample, err = os.ReadFile(samplePath); err != nil {
			return fail(err)
		}
	}
	tenant, pipeline, err := c.scope(ctx, cf.tenant, cf.pipeline)
	if err != nil {
		return fail(err)
	}
	base := "/v1/tenants/" + url.PathEscape(tenant) + "/pipelines/" + url.PathEscape(pipeline)
	where := tenant + "/" + pipeline
	out := bufio.NewWriter(stdout)
	defer out.Flush()

	switch verb {
	case "push":
		v, err := c.push(ctx, base, pos[0], note)
		if err != nil {
			return fail(err)
		}
		if v.Created {
			fmt.Fprintf(out, "uploaded %s %s (%d bytes)\n", where, v.Version.SHA256, v.Version.Size)
		} else {
			fmt.Fprintf(out, "%s already has %s (uploaded %s by %s)\n", where, v.Version.SHA256,
				v.Version.UploadedAt.Format(time.RFC3339), v.Version.UploadedBy)
		}
		if !activate {
			return 0
		}
		return c.activate(ctx, out, base, where, v.Version.SHA256, sample, fail)
	case "activate":
		return c.activate(ctx, out, base, where, pos[0], sample, fail)
	case "rollback":
		var resp tenancy.ActivateResponse
		if err := c.call(ctx, "POST", base+"/rollback", nil, -1, &resp); err != nil {
			return fail(err)
		}
		fmt.Fprintf(out, "rolled back %s to %s (from %s)\n", where, resp.Active.SHA256, shaOrNone(resp.Previous))
	case "rm":
		if err := c.call(ctx, "DELETE", base+"/modules/"+url.PathEscape(pos[0]), nil, -1, nil); err != nil {
			return fail(err)
		}
		fmt.Fprintf(out, "deleted %s %s\n", where, pos[0])
	case "ls":
		if asJSON {
			raw, err := c.send(ctx, "GET", base+"/modules", nil, -1)
			if err != nil {
				return fail(err)
			}
			out.Write(raw)
			return 0
		}
		var resp tenancy.ListResponse
		if err := c.call(ctx, "GET", base+"/modules", nil, -1, &resp); err != nil {
			return fail(err)
		}
		printVersions(out, where, &resp)
	}
	return 0
}

func (c *apiClient) activate(ctx context.Context, out io.Writer, base, where, ref string, sample []byte, fail func(error) int) int {
	var resp tenancy.ActivateResponse
	if err := c.call(ctx, "POST", base+"/modules/"+url.PathEscape(ref)+"/activate", bytes.NewReader(sample), int64(len(sample)), &resp); err != nil {
		return fail(err)
	}
	if !resp.Changed {
		fmt.Fprintf(out, "%s: %s is already active\n", where, resp.Active.SHA256)
		return 0
	}
	fmt.Fprintf(out, "activated %s %s (previous: %s)\n", where, resp.Active.SHA256, shaOrNone(resp.Previous))
	return 0
}

func shaOrNone(v *tenancy.Version) string {
	if v == nil {
		return "none"
	}
	return v.SHA256
}

// printVersions renders a pipeline's versions, oldest first: * marks the
// active one, ! a quarantined one (listed after the table with why).
func printVersions(w io.Writer, where string, l *tenancy.ListResponse) {
	fmt.Fprintf(w, "%s: %d version(s)\n", where, len(l.Versions))
	defer printQuarantined(w, l.Quarantined)
	if len(l.Versions) == 0 {
		return
	}
	quarantined := map[string]bool{}
	for _, q := range l.Quarantined {
		quarantined[q.SHA256] = true
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\tSHA256\tSIZE\tUPLOADED\tBY\tNOTE")
	for _, v := range l.Versions {
		mark := ""
		if l.Active != nil && l.Active.SHA256 == v.SHA256 {
			mark = "*"
		}
		if quarantined[v.SHA256] {
			mark = "!"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", mark, v.SHA256[:16], v.Size,
			v.UploadedAt.Format(time.RFC3339), v.UploadedBy, v.Note)
	}
	tw.Flush()
	if n := len(l.RollbackStack); n > 0 {
		fmt.Fprintf(w, "rollback returns to %s\n", l.RollbackStack[n-1][:16])
	}
}

// printQuarantined lists a pipeline's quarantined versions.
func printQuarantined(w io.Writer, qs []tenancy.Quarantine) {
	for _, q := range qs {
		fmt.Fprintf(w, "! %s quarantined at %s: %s (an admin's activation runs it again)\n",
			q.SHA256[:16], q.At.Format(time.RFC3339), q.Reason)
	}
}

// parseInterleaved parses flags that may come before, between or after the
// positional arguments, and returns those; "--" ends the flags.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// apiClient calls the admin API.
type apiClient struct {
	base  *url.URL
	token string
	http  *http.Client
}

func newAPIClient(cf clientFlags, stderr io.Writer) (*apiClient, error) {
	if cf.server == "" {
		return nil, errors.New("no server: give -server or set $SLUICE_SERVER")
	}
	base, err := url.Parse(strings.TrimSuffix(cf.server, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return nil, fmt.Errorf("-server %q: want http(s)://host:port", cf.server)
	}
	token, err := resolveToken(cf)
	if err != nil {
		return nil, err
	}
	if base.Scheme == "http" && !isLoopback(base.Hostname()) {
		fmt.Fprintf(stderr, "warning: sending the token unencrypted to %s; use https\n", base.Host)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if cf.ca != "" {
		pem, err := os.ReadFile(cf.ca)
		if err != nil {
			return nil, fmt.Errorf("-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-ca %s: no PEM certificate in it", cf.ca)
		}
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &apiClient{base: base, token: token, http: &http.Client{Transport: transport}}, nil
}

// resolveToken takes the token from -token, -token-file, $SLUICE_TOKEN or
// the file $SLUICE_TOKEN_FILE names, the first one set.
func resolveToken(cf clientFlags) (string, error) {
	if cf.token != "" {
		return cf.token, nil
	}
	fromFile := func(what, path string) (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("%s: %w", what, err)
		}
		token := strings.TrimSpace(string(b))
		if token == "" {
			return "", fmt.Errorf("%s: %s is empty", what, path)
		}
		return token, nil
	}
	if cf.tokenFile != "" {
		return fromFile("-token-file", cf.tokenFile)
	}
	if token := strings.TrimSpace(os.Getenv("SLUICE_TOKEN")); token != "" {
		return token, nil
	}
	if path := os.Getenv("SLUICE_TOKEN_FILE"); path != "" {
		return fromFile("$SLUICE_TOKEN_FILE", path)
	}
	return "", errors.New("no token: set $SLUICE_TOKEN or $SLUICE_TOKEN_FILE, or give -token-file")
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// apiError is a refusal from the server, with its reason.
type apiError struct {
	status int
	reason string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.status, http.StatusText(e.status), e.reason)
}

// call sends a request and decodes a 2xx JSON answer into out (if not nil);
// any other answer is an *apiError. size is the body's length, -1 if
// unknown or there is none.
func (c *apiClient) call(ctx context.Context, method, path string, body io.Reader, size int64, out any) error {
	raw, err := c.send(ctx, method, path, body, size)
	if err != nil {
		return err
	}
	if out == nil || len(raw) == 0 {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: the answer is not what this client expects (%v)", method, path, err)
	}
	return nil
}

// send makes a request; path is escaped and may carry a query.
func (c *apiClient) send(ctx context.Context, method, path string, body io.Reader, size int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+path, body)
	if err != nil {
		return nil, err
	}
	if size >= 0 {
		req.ContentLength = size
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode/100 == 2 {
		return raw, nil
	}
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(raw, &e) != nil || e.Error == "" {
		e.Error = strings.TrimSpace(string(raw))
		if len(e.Error) > 500 {
			e.Error = e.Error[:500] + "…"
		}
	}
	return nil, &apiError{status: resp.StatusCode, reason: e.Error}
}

// scope fills in the tenant and pipeline the token implies.
func (c *apiClient) scope(ctx context.Context, tenant, pipeline string) (string, string, error) {
	if tenant != "" && pipeline != "" {
		return tenant, pipeline, nil
	}
	var who tenancy.WhoamiResponse
	if err := c.call(ctx, "GET", "/v1/whoami", nil, -1, &who); err != nil {
		return "", "", err
	}
	if tenant == "" {
		if who.Admin {
			return "", "", errors.New("-tenant is required with an admin token")
		}
		tenant = who.Tenant
	}
	if pipeline != "" {
		return tenant, pipeline, nil
	}
	pipelines := who.Pipelines
	if who.Admin {
		var all tenancy.TenantsResponse
		if err := c.call(ctx, "GET", "/v1/tenants", nil, -1, &all); err != nil {
			return "", "", err
		}
		pipelines = nil
		for _, t := range all.Tenants {
			if t.ID == tenant {
				for _, p := range t.Pipelines {
					pipelines = append(pipelines, p.Name)
				}
			}
		}
	} else if tenant != who.Tenant {
		pipelines = nil // another tenant's: the server will refuse anyway
	}
	if len(pipelines) != 1 {
		return "", "", fmt.Errorf("-pipeline is required: tenant %s has pipelines %v", tenant, pipelines)
	}
	return tenant, pipelines[0], nil
}

// push uploads a module file.
func (c *apiClient) push(ctx context.Context, base, path, note string) (*tenancy.UploadResponse, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() == 0 {
		return nil, fmt.Errorf("%s is empty", path)
	}
	q := ""
	if note != "" {
		q = "?note=" + url.QueryEscape(note)
	}
	var resp tenancy.UploadResponse
	// The length goes ahead of the body, so that the server can refuse an
	// oversized module before it is sent.
	if err := c.call(ctx, "POST", base+"/modules"+q, f, st.Size(), &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// cmdToken runs "sluice token new|hash".
func cmdToken(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprint(stderr, tokenUsage)
		return 2
	}
	switch args[0] {
	case "new":
		var b [32]byte
		if _, err := rand.Read(b[:]); err != nil {
			fmt.Fprintln(stderr, "sluice token new:", err)
			return 1
		}
		token := "sluice_" + base64.RawURLEncoding.EncodeToString(b[:])
		fmt.Fprintf(stdout, "token: %s\nhash:  %s\n", token, tenancy.HashToken(token))
		return 0
	case "hash":
		line, err := bufio.NewReader(io.LimitReader(tokenInput, 4096)).ReadString('\n')
		if err != nil && err != io.EOF {
			fmt.Fprintln(stderr, "sluice token hash:", err)
			return 1
		}
		token := strings.TrimSpace(line)
		if token == "" {
			fmt.Fprintln(stderr, "sluice token hash: no token on standard input")
			return 1
		}
		fmt.Fprintln(stdout, tenancy.HashToken(token))
		return 0
	}
	return helpOrUnknown("sluice token", args[0], tokenUsage, stdout, stderr)
}
