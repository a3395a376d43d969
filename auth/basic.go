package auth

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"
)

// BasicRealm is the realm of the http_basic challenge.
const BasicRealm = "metalloc"

// HTTPBasic is Ironic's http_basic strategy: an Apache htpasswd file
// ("user:hash" lines, bcrypt hashes only: $2y$, $2a$, $2b$, as `htpasswd -B`
// writes them) checked against the Authorization: Basic header. The file is
// read at start (NewHTTPBasic fails on a missing file or a non-bcrypt
// entry, as Ironic refuses to start) and re-read when its modification time
// or size changes, at most once a second; a file that became unreadable or
// invalid keeps the last good contents (logged). As in Ironic, a missing or
// wrong credential is 401 with a Basic challenge, an undecodable header 400,
// and an authenticated user acts as SystemAdmin (Ironic checks no access
// rules outside keystone mode; metalloc-placement does the same).
type HTTPBasic struct {
	path string
	log  *zap.Logger

	mu      sync.Mutex
	users   map[string][]byte
	stamp   fileStamp
	checked time.Time
	// dummy is a bcrypt hash of a random password, compared against for
	// unknown users.
	dummy []byte
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// NewHTTPBasic loads the htpasswd file at path.
func NewHTTPBasic(path string, log *zap.Logger) (*HTTPBasic, error) {
	if path == "" {
		return nil, fmt.Errorf("auth_strategy http_basic needs http_basic_auth_user_file")
	}
	b := &HTTPBasic{path: path, log: log}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("http_basic_auth_user_file: %w", err)
	}
	users, err := readHtpasswd(path)
	if err != nil {
		return nil, err
	}
	b.users, b.stamp, b.checked = users, fileStamp{st.ModTime(), st.Size()}, time.Now()
	if b.dummy, err = bcrypt.GenerateFromPassword([]byte(time.Now().String()), bcrypt.DefaultCost); err != nil {
		return nil, err
	}
	return b, nil
}

// readHtpasswd parses an htpasswd file; blank lines and lines without ':'
// are ignored, as Ironic does; a non-bcrypt entry is an error.
func readHtpasswd(path string) (map[string][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("http_basic_auth_user_file: %w", err)
	}
	users := map[string][]byte{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		user, hash, ok := strings.Cut(line, ":")
		if line == "" || !ok {
			continue
		}
		if !strings.HasPrefix(hash, "$2y$") && !strings.HasPrefix(hash, "$2a$") && !strings.HasPrefix(hash, "$2b$") {
			return nil, fmt.Errorf("%s line %d: only bcrypt digested passwords are supported (user %q; create entries with htpasswd -B)", path, n, user)
		}
		if _, dup := users[user]; !dup { // the first entry wins, as Ironic reads the file
			users[user] = []byte(hash)
		}
	}
	return users, sc.Err()
}

// lookup returns the user's hash, re-reading the file if it changed.
func (b *HTTPBasic) lookup(user string) ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now := time.Now(); now.Sub(b.checked) >= time.Second {
		b.checked = now
		if st, err := os.Stat(b.path); err != nil {
			b.log.Warn("http_basic_auth_user_file unreadable; keeping the last users read", zap.Error(err))
		} else if stamp := (fileStamp{st.ModTime(), st.Size()}); stamp != b.stamp {
			if users, err := readHtpasswd(b.path); err != nil {
				b.log.Warn("http_basic_auth_user_file invalid; keeping the last users read", zap.Error(err))
			} else {
				b.users, b.stamp = users, stamp
				b.log.Info("http_basic_auth_user_file reloaded", zap.Int("users", len(users)))
			}
		}
	}
	h, ok := b.users[user]
	return h, ok
}

// Authenticate implements Authenticator.
func (b *HTTPBasic) Authenticate(_ context.Context, r *http.Request) (Credentials, error) {
	challenge := `Basic realm="` + BasicRealm + `"`
	header := r.Header.Get("Authorization")
	if header == "" {
		return Credentials{}, unauthorized(challenge, "Authorization required")
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok {
		return Credentials{}, &Failure{Status: http.StatusBadRequest, Message: "Could not parse Authorization header"}
	}
	if !strings.EqualFold(scheme, "basic") {
		return Credentials{}, &Failure{Status: http.StatusBadRequest, Message: fmt.Sprintf("Unsupported authorization type %q", scheme)}
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(token))
	user, password, ok := strings.Cut(string(raw), ":")
	if err != nil || !ok {
		return Credentials{}, &Failure{Status: http.StatusBadRequest, Message: "Could not decode authorization token"}
	}
	hash, known := b.lookup(user)
	if !known {
		// Spend the time of a real check so that timing does not tell
		// which user names exist.
		_ = bcrypt.CompareHashAndPassword(b.dummy, []byte(password))
		return Credentials{}, unauthorized(challenge, "Incorrect username or password")
	}
	if bcrypt.CompareHashAndPassword(hash, []byte(password)) != nil {
		return Credentials{}, unauthorized(challenge, "Incorrect username or password")
	}
	return SystemAdmin(user), nil
}
