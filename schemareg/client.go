package schemareg

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/sr"

	"github.com/walbox/walbox/kafkasec"
)

// Defaults of the registry client.
const (
	DefaultRequestTimeout = 10 * time.Second
	DefaultRetryBudget    = 30 * time.Second
	DefaultCacheSize      = 1024
)

// ClientConfig says how to reach the registry. The zero value with URLs set
// reaches a registry without authentication over plain HTTP.
type ClientConfig struct {
	// URLs are the registry's base URLs (Apicurio's Confluent API is at
	// /apis/ccompat/v7 under its root); a request that cannot connect is
	// tried at the next one.
	URLs []string

	// BasicAuthUser and BasicAuthPassword, or BasicAuthPasswordFile (read
	// once by NewClient, winning over BasicAuthPassword), authenticate
	// with HTTP basic authentication.
	BasicAuthUser         string
	BasicAuthPassword     string
	BasicAuthPasswordFile string
	// BearerToken, or BearerTokenFile (winning), authenticates with a
	// bearer token. Not together with basic authentication.
	BearerToken     string
	BearerTokenFile string

	// TLSCAFile is a PEM CA bundle to verify the registry with (the
	// system's when empty); TLSCertFile and TLSKeyFile a client key pair
	// for mutual TLS; TLSServerName overrides the name verified.
	TLSCAFile     string
	TLSCertFile   string
	TLSKeyFile    string
	TLSServerName string

	// RequestTimeout bounds one HTTP request (DefaultRequestTimeout).
	RequestTimeout time.Duration
	// RetryBudget bounds how long a transient fault (unreachable, timeout,
	// 5xx, 429) is retried, with exponential backoff from 100 ms to 5 s,
	// before ErrRegistryUnavailable is returned (DefaultRetryBudget).
	RetryBudget time.Duration
}

// Validate checks the configuration without reading any file; each problem
// wraps ErrInvalidConfig.
func (c ClientConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if len(c.URLs) == 0 {
		bad("no registry URL; give the registry's base URL, e.g. http://registry:8081 (Apicurio: http://registry:8080/apis/ccompat/v7)")
	}
	for _, u := range c.URLs {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			bad("registry URL %q is not an http:// or https:// URL with a host", redactURL(u))
			continue
		}
		if p.User != nil {
			bad("registry URL %q carries credentials; give them as the basic-auth user and password instead", redactURL(u))
		}
	}
	basic := c.BasicAuthUser != "" || c.BasicAuthPassword != "" || c.BasicAuthPasswordFile != ""
	if basic && c.BasicAuthUser == "" {
		bad("a basic-auth password without a user; give the user too")
	}
	if c.BasicAuthUser != "" && c.BasicAuthPassword == "" && c.BasicAuthPasswordFile == "" {
		bad("basic-auth user %q without a password; give the password or a password file", c.BasicAuthUser)
	}
	if basic && (c.BearerToken != "" || c.BearerTokenFile != "") {
		bad("both basic authentication and a bearer token; give one of them")
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		bad("mutual TLS needs both the client certificate and its key; give both or neither")
	}
	if c.RequestTimeout < 0 || c.RetryBudget < 0 {
		bad("negative timeout; give a positive duration, or 0 for the default")
	}
	return errors.Join(errs...)
}

// tlsEnabled reports whether TLS settings were given.
func (c ClientConfig) tlsEnabled() bool {
	return c.TLSCAFile != "" || c.TLSCertFile != "" || c.TLSServerName != ""
}

// Client is a registry client that retries transient faults and classifies
// the others. Safe for concurrent use.
type Client struct {
	cl     *sr.Client
	budget time.Duration
	urls   string // for messages
	// sleep waits between retries; replaced in tests.
	sleep func(ctx context.Context, d time.Duration) error
}

// NewClient validates cfg, reads its secret and TLS files and returns a
// Client. It makes no request.
func NewClient(cfg ClientConfig) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.RetryBudget == 0 {
		cfg.RetryBudget = DefaultRetryBudget
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if cfg.tlsEnabled() {
		tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.TLSServerName}
		if cfg.TLSCAFile != "" {
			pool, err := kafkasec.LoadCA(cfg.TLSCAFile)
			if err != nil {
				return nil, fmt.Errorf("%w: registry CA file: %w", ErrInvalidConfig, err)
			}
			tc.RootCAs = pool
		}
		if cfg.TLSCertFile != "" {
			pair, err := kafkasec.LoadKeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
			if err != nil {
				return nil, fmt.Errorf("%w: registry client certificate: %w", ErrInvalidConfig, err)
			}
			tc.Certificates = []tls.Certificate{pair}
		}
		tr.TLSClientConfig = tc
	}
	opts := []sr.ClientOpt{
		sr.URLs(cfg.URLs...),
		sr.HTTPClient(&http.Client{Transport: tr, Timeout: cfg.RequestTimeout}),
		sr.UserAgent("walbox"),
	}
	if cfg.BasicAuthUser != "" {
		pass := cfg.BasicAuthPassword
		if cfg.BasicAuthPasswordFile != "" {
			var err error
			if pass, err = kafkasec.ReadSecretFile(cfg.BasicAuthPasswordFile); err != nil {
				return nil, fmt.Errorf("%w: registry basic-auth password file: %w", ErrInvalidConfig, err)
			}
		}
		opts = append(opts, sr.BasicAuth(cfg.BasicAuthUser, pass))
	}
	if tok := cfg.BearerToken; tok != "" || cfg.BearerTokenFile != "" {
		if cfg.BearerTokenFile != "" {
			var err error
			if tok, err = kafkasec.ReadSecretFile(cfg.BearerTokenFile); err != nil {
				return nil, fmt.Errorf("%w: registry bearer token file: %w", ErrInvalidConfig, err)
			}
		}
		opts = append(opts, sr.BearerToken(tok))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	urls := make([]string, len(cfg.URLs))
	for i, u := range cfg.URLs {
		urls[i] = redactURL(u)
	}
	return &Client{cl: cl, budget: cfg.RetryBudget, urls: strings.Join(urls, ","), sleep: sleepCtx}, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// SchemaByVersion returns the schema of subject at version, -1 for the
// latest.
func (c *Client) SchemaByVersion(ctx context.Context, subject string, version int) (sr.SubjectSchema, error) {
	op := "get version"
	if version < 0 {
		op = "get the latest version"
	}
	var out sr.SubjectSchema
	err := c.retry(ctx, func(ctx context.Context) (err error) {
		out, err = c.cl.SchemaByVersion(ctx, subject, version)
		return err
	}, func(err error) *RegistryError {
		return c.classify(err, op, subject, version, 0)
	})
	return out, err
}

// SchemaByID returns the schema with id, and sets Subject to subject (the
// registry's by-id answer names none).
func (c *Client) SchemaByID(ctx context.Context, subject string, id int) (sr.SubjectSchema, error) {
	var out sr.Schema
	err := c.retry(ctx, func(ctx context.Context) (err error) {
		out, err = c.cl.SchemaByID(ctx, id)
		return err
	}, func(err error) *RegistryError {
		return c.classify(err, "get the schema by id", subject, 0, id)
	})
	return sr.SubjectSchema{Subject: subject, ID: id, Schema: out}, err
}

// Register registers schema under subject, or finds it registered there,
// and returns its id (one request: POST /subjects/{subject}/versions).
func (c *Client) Register(ctx context.Context, subject string, schema sr.Schema) (int, error) {
	var id int
	err := c.retry(ctx, func(ctx context.Context) (err error) {
		id, err = c.cl.RegisterSchema(ctx, subject, schema, -1, -1)
		return err
	}, func(err error) *RegistryError {
		re := c.classify(err, "register the inferred schema", subject, 0, 0)
		if re.Status == http.StatusUnprocessableEntity {
			re.Fix = "the registry refuses the inferred schema as invalid; see its message"
		}
		return re
	})
	return id, err
}

// Backoff bounds between retries.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// retry runs do until it succeeds, fails permanently, the context ends or
// the retry budget is spent.
func (c *Client) retry(ctx context.Context, do func(context.Context) error, classify func(error) *RegistryError) error {
	start := time.Now()
	var waited time.Duration
	backoff := minBackoff
	for {
		err := do(ctx)
		if err == nil {
			return nil
		}
		re := classify(err)
		if ctx.Err() != nil {
			re.Transient = true
			re.Err = errors.Join(err, ctx.Err())
			re.Fix = "walbox was stopping"
			return re
		}
		// The budget counts the waits and the requests' own time alike.
		if !re.Transient || waited+backoff > c.budget || time.Since(start)+backoff > c.budget {
			return re
		}
		if err := c.sleep(ctx, backoff); err != nil {
			re.Err = errors.Join(re.Err, err)
			return re
		}
		waited += backoff
		backoff = min(backoff*2, maxBackoff)
	}
}

// classify tells transient from permanent faults, in one place.
func (c *Client) classify(err error, op, subject string, version, id int) *RegistryError {
	re := &RegistryError{Op: op, Subject: subject, Version: version, ID: id, Err: err}
	var (
		resp   *sr.ResponseError
		verify *tls.CertificateVerificationError
		netOp  *net.OpError
	)
	switch {
	case errors.As(err, &verify):
		// The registry's certificate does not verify: asking again
		// changes nothing.
		re.Fix = "the registry's certificate does not verify; give the CA that signed it as the registry CA file, or check the URL's host name"
		return re
	case errors.As(err, &netOp) && netOp.Op == "remote error":
		// crypto/tls reports a TLS alert from the peer so: the registry
		// ended the handshake, typically for a missing or untrusted
		// client certificate.
		re.Fix = "the registry refused the TLS handshake; give a client certificate and key it trusts (mutual TLS)"
		return re
	}
	if !errors.As(err, &resp) {
		// No answer: a refused connection, a timeout, a reset. The
		// registry may come back; retry.
		re.Transient = true
		re.Fix = "check that the registry at " + c.urls + " is running and reachable"
		var nerr net.Error
		if errors.As(err, &nerr) && nerr.Timeout() {
			re.Fix = "the registry at " + c.urls + " did not answer in time; check its load, or raise the request timeout"
		}
		return re
	}
	re.Status = resp.StatusCode
	switch {
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		// Overload or a fault of the registry or its store: it may pass.
		re.Transient = true
		re.Fix = "the registry at " + c.urls + " is failing; check its logs"
	case resp.StatusCode == http.StatusUnauthorized:
		re.Fix = "the registry refused walbox's credentials; check the basic-auth user and password or the bearer token"
	case resp.StatusCode == http.StatusForbidden:
		re.Fix = "the registry refused access: check walbox's credentials, and that they may read the subject"
	case resp.ErrorCode == sr.ErrSubjectNotFound.Code || resp.ErrorCode == sr.ErrSubjectSoftDeleted.Code:
		re.Fix = "register the schema under subject " + quote(subject) + ", or check the subject name strategy"
	case resp.ErrorCode == sr.ErrVersionNotFound.Code || resp.ErrorCode == sr.ErrSchemaVersionSoftDeleted.Code:
		// Apicurio answers 40402 for an unknown subject too.
		re.Fix = "register the schema under subject " + quote(subject) + " (the subject or that version does not exist or was deleted), or pin an existing version"
	case resp.ErrorCode == sr.ErrSchemaNotFound.Code:
		re.Fix = "no schema has that id; pin an id the registry holds"
	case resp.StatusCode == http.StatusNotFound:
		re.Fix = "check the registry URL " + c.urls + " (Apicurio's Confluent API is under /apis/ccompat/v7)"
	default:
		re.Fix = "see the registry's message"
	}
	return re
}

func quote(s string) string { return `"` + s + `"` }

// redactURL hides a password in a URL.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}
