package auth

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// KeystoneConfig is the `keystone` configuration section: where Keystone v3
// is and the service user metalloc authenticates as, both to validate
// clients' tokens (keystonemiddleware's auth_token does the same with its
// [keystone_authtoken] options) and to call Placement as a client.
type KeystoneConfig struct {
	// AuthURL is Keystone's identity endpoint, with or without /v3
	// (http://keystone:5000/v3).
	AuthURL           string `mapstructure:"auth_url"`
	Username          string `mapstructure:"username"`
	Password          string `mapstructure:"password"`
	ProjectName       string `mapstructure:"project_name"`
	UserDomainName    string `mapstructure:"user_domain_name"`
	ProjectDomainName string `mapstructure:"project_domain_name"`
	// TokenCacheTime is how long a validated token (or a refusal) is kept
	// before asking Keystone again (default 300 s, keystonemiddleware's
	// token_cache_time); a token revoked meanwhile stays usable that long,
	// as with keystonemiddleware. 0 disables the cache.
	TokenCacheTime time.Duration `mapstructure:"token_cache_time"`
	// CAFile is a PEM bundle to verify Keystone's certificate with (default:
	// the system's roots).
	CAFile string `mapstructure:"ca_file"`
	// Timeout bounds each request to Keystone (default 10 s).
	Timeout time.Duration `mapstructure:"timeout"`
}

// DefaultTokenCacheTime is keystone.token_cache_time's default.
const DefaultTokenCacheTime = 300 * time.Second

// tokenCacheSize bounds the validated-token cache (entries).
const tokenCacheSize = 10000

// Keystone validates clients' X-Auth-Token against Keystone v3 (GET
// /v3/auth/tokens with the service's own token in X-Auth-Token and the
// client's in X-Subject-Token), caches the answers for TokenCacheTime (at
// most tokenCacheSize tokens, keyed by their SHA-256, never the token
// itself) and derives Credentials from the token body: user, project,
// domain, roles (Keystone includes implied roles) and system scope.
// Identity headers the client sends (X-Roles, X-Project-Id, ...) are never
// read. A missing, invalid, expired or revoked token is 401 with a
// `Keystone uri="..."` challenge; Keystone unreachable or failing is 503,
// never a pass.
type Keystone struct {
	cfg    KeystoneConfig
	base   string // AuthURL ending in /v3, no trailing slash
	client *http.Client
	log    *zap.Logger

	svcMu      sync.Mutex // guards svcToken, svcExpires; held while fetching one
	svcToken   string
	svcExpires time.Time

	mu    sync.Mutex // guards cache
	cache map[[32]byte]cachedToken
}

type cachedToken struct {
	creds   Credentials
	invalid bool
	until   time.Time
}

// NewKeystone checks cfg and returns a Keystone authenticator using client
// (nil: a client with cfg.Timeout and cfg.CAFile). It does not contact
// Keystone: a service may start while Keystone is down and answers 503
// until it is back.
func NewKeystone(cfg KeystoneConfig, client *http.Client, log *zap.Logger) (*Keystone, error) {
	if cfg.AuthURL == "" || cfg.Username == "" || cfg.Password == "" {
		return nil, errors.New("auth_strategy keystone needs keystone.auth_url, keystone.username and keystone.password")
	}
	if cfg.UserDomainName == "" {
		cfg.UserDomainName = "Default"
	}
	if cfg.ProjectDomainName == "" {
		cfg.ProjectDomainName = "Default"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if client == nil {
		var err error
		if client, err = HTTPClient(cfg.CAFile, cfg.Timeout); err != nil {
			return nil, fmt.Errorf("keystone.ca_file: %w", err)
		}
	}
	base := strings.TrimRight(cfg.AuthURL, "/")
	if !strings.HasSuffix(base, "/v3") {
		base += "/v3"
	}
	return &Keystone{cfg: cfg, base: base, client: client, log: log, cache: map[[32]byte]cachedToken{}}, nil
}

func (k *Keystone) challenge() string {
	return `Keystone uri="` + strings.TrimSuffix(k.base, "/v3") + `"`
}

func (k *Keystone) unavailable(err error) *Failure {
	k.log.Warn("keystone unavailable", zap.Error(err))
	return &Failure{Status: http.StatusServiceUnavailable, Message: "The Keystone service is temporarily unavailable."}
}

// Authenticate implements Authenticator.
func (k *Keystone) Authenticate(ctx context.Context, r *http.Request) (Credentials, error) {
	token := r.Header.Get("X-Auth-Token")
	if token == "" {
		return Credentials{}, unauthorized(k.challenge(), "The request you have made requires authentication.")
	}
	key := sha256.Sum256([]byte(token))
	now := time.Now()
	k.mu.Lock()
	e, hit := k.cache[key]
	k.mu.Unlock()
	if !hit || now.After(e.until) {
		var err error
		if e, err = k.validate(ctx, token); err != nil {
			return Credentials{}, err
		}
		k.remember(key, e, now)
	}
	if e.invalid {
		return Credentials{}, unauthorized(k.challenge(), "The request you have made requires authentication.")
	}
	return e.creds, nil
}

// remember caches e, evicting expired entries (then arbitrary ones) when
// the cache is full.
func (k *Keystone) remember(key [32]byte, e cachedToken, now time.Time) {
	if k.cfg.TokenCacheTime <= 0 {
		return
	}
	if until := now.Add(k.cfg.TokenCacheTime); e.until.IsZero() || until.Before(e.until) {
		e.until = until
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.cache) >= tokenCacheSize {
		for h, old := range k.cache {
			if now.After(old.until) {
				delete(k.cache, h)
			}
		}
		for h := range k.cache {
			if len(k.cache) < tokenCacheSize {
				break
			}
			delete(k.cache, h)
		}
	}
	k.cache[key] = e
}

// tokenBody is the part of Keystone's token document metalloc reads.
type tokenBody struct {
	Token struct {
		ExpiresAt time.Time `json:"expires_at"`
		User      struct {
			ID, Name string
		} `json:"user"`
		Project *struct {
			ID, Name string
			Domain   struct{ ID string } `json:"domain"`
		} `json:"project"`
		Domain *struct {
			ID, Name string
		} `json:"domain"`
		System *struct {
			All bool `json:"all"`
		} `json:"system"`
		Roles []struct {
			Name string `json:"name"`
		} `json:"roles"`
		IsAdminProject *bool `json:"is_admin_project"`
	} `json:"token"`
}

// validate asks Keystone about token; a refusal comes back as an invalid
// entry, Keystone's own failures as a 503 *Failure.
func (k *Keystone) validate(ctx context.Context, token string) (cachedToken, error) {
	for attempt := 0; ; attempt++ {
		svc, err := k.ServiceToken(ctx)
		if err != nil {
			return cachedToken{}, err
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, k.base+"/auth/tokens", nil)
		req.Header.Set("X-Auth-Token", svc)
		req.Header.Set("X-Subject-Token", token)
		resp, err := k.client.Do(req)
		if err != nil {
			return cachedToken{}, k.unavailable(err)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		switch {
		case err != nil:
			return cachedToken{}, k.unavailable(err)
		case resp.StatusCode == http.StatusOK:
			var tb tokenBody
			if err := json.Unmarshal(body, &tb); err != nil {
				return cachedToken{}, k.unavailable(fmt.Errorf("token validation answer: %w", err))
			}
			return tokenEntry(tb), nil
		case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusBadRequest:
			// Unknown, expired, revoked or malformed subject token.
			return cachedToken{invalid: true}, nil
		case (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) && attempt == 0:
			// Our own token expired or was revoked: get a new one, once.
			k.Invalidate()
		default:
			return cachedToken{}, k.unavailable(fmt.Errorf("token validation: Keystone answered %d", resp.StatusCode))
		}
	}
}

func tokenEntry(tb tokenBody) cachedToken {
	t := tb.Token
	c := Credentials{UserID: t.User.ID, UserName: t.User.Name}
	if t.Project != nil {
		c.ProjectID, c.ProjectName, c.ProjectDomainID = t.Project.ID, t.Project.Name, t.Project.Domain.ID
	}
	if t.Domain != nil {
		c.DomainID = t.Domain.ID
	}
	if t.System != nil && t.System.All {
		c.SystemScope = "all"
	}
	for _, r := range t.Roles {
		c.Roles = append(c.Roles, strings.ToLower(r.Name))
	}
	c.NotAdminProject = t.IsAdminProject != nil && !*t.IsAdminProject
	return cachedToken{creds: c, until: t.ExpiresAt}
}

// ServiceToken returns metalloc's own project-scoped token (the keystone
// section's user), getting a new one when it is missing or expires within
// a minute. Placement clients send it as X-Auth-Token. Errors are 503
// *Failure values (a wrong password is logged, and is 503 to the client
// whose request needed the token).
func (k *Keystone) ServiceToken(ctx context.Context) (string, error) {
	k.svcMu.Lock()
	defer k.svcMu.Unlock()
	if k.svcToken != "" && time.Until(k.svcExpires) > time.Minute {
		return k.svcToken, nil
	}
	body := map[string]any{"auth": map[string]any{
		"identity": map[string]any{
			"methods": []string{"password"},
			"password": map[string]any{"user": map[string]any{
				"name": k.cfg.Username, "password": k.cfg.Password,
				"domain": map[string]string{"name": k.cfg.UserDomainName},
			}},
		},
		"scope": map[string]any{"project": map[string]any{
			"name": k.cfg.ProjectName, "domain": map[string]string{"name": k.cfg.ProjectDomainName},
		}},
	}}
	raw, _ := json.Marshal(body)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, k.base+"/auth/tokens", bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	resp, err := k.client.Do(req)
	if err != nil {
		return "", k.unavailable(err)
	}
	defer resp.Body.Close()
	var tb tokenBody
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&tb); err != nil || resp.StatusCode != http.StatusCreated {
		return "", k.unavailable(fmt.Errorf("getting a token for keystone.username %q: Keystone answered %d", k.cfg.Username, resp.StatusCode))
	}
	k.svcToken, k.svcExpires = resp.Header.Get("X-Subject-Token"), tb.Token.ExpiresAt
	return k.svcToken, nil
}

// Invalidate drops the service token, so that the next ServiceToken call
// gets a new one (a client calls it after a 401 from the service it called).
func (k *Keystone) Invalidate() {
	k.svcMu.Lock()
	k.svcToken = ""
	k.svcMu.Unlock()
}
