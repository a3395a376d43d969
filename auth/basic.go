package auth

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"
)

// BasicRealm is the realm of the http_basic challenge.
const BasicRealm = "metalloc"

// MaxBasicPasswordLen is the longest password http_basic accepts, in bytes:
// bcrypt only reads the first 72 bytes of a password, so a longer one would
// let in anyone who knows its first 72. Longer passwords are refused (401)
// before any hash is compared. (htpasswd -B truncates them silently.)
const MaxBasicPasswordLen = 72

// Bounds on the bcrypt comparisons http_basic runs at a time (one per
// request whose credentials are not already known good): at most
// max(2, GOMAXPROCS) compare at once, up to basicQueuedPerSlot times as
// many more wait for a turn, and beyond that a request is refused at once
// with 503 and Retry-After: basicRetryAfter (seconds), so that a flood of
// wrong or unknown credentials cannot take every CPU. Credentials verified
// once are remembered (see basicCacheSize) and skip the comparison.
const (
	basicQueuedPerSlot = 32
	basicRetryAfter    = 1
)

// basicCacheSize bounds how many verified credentials HTTPBasic remembers
// (an HMAC of user and password under a key of the process, never the
// password); the memory is cleared when full and at every reload of the
// file.
const basicCacheSize = 4096

// defaultDummyCost is the cost of the dummy hash while the file has no entry.
const defaultDummyCost = bcrypt.DefaultCost

// HTTPBasic is Ironic's http_basic strategy: an Apache htpasswd file
// ("user:hash" lines, bcrypt hashes only: $2y$, $2a$, $2b$, as `htpasswd -B`
// writes them) checked against the Authorization: Basic header.
//
// The file is read at start (NewHTTPBasic fails on a missing file or a
// non-bcrypt entry, as Ironic refuses to start) and re-read when it changes
// (modification time, size or inode: an editor's rename counts), looked at
// at most once a second. A reload takes effect whole: a user the new file
// no longer has is refused from then on; a line that is not a valid bcrypt
// entry (say, one `htpasswd -m` wrote) is skipped and logged with its line
// number, and the other lines take effect; a file that became unreadable
// or was removed leaves no user (logged), never the previous ones.
//
// As in Ironic, a missing or wrong credential is 401 with a Basic
// challenge, an undecodable header 400, and an authenticated user acts as
// SystemAdmin (Ironic checks no access rules outside keystone mode;
// metalloc-placement does the same). metalloc also refuses passwords over
// MaxBasicPasswordLen (401), spends the same time on an unknown user as on
// a wrong password (a dummy hash of the file's median cost), and bounds
// the comparisons running at a time (503 with Retry-After beyond; see
// basicQueuedPerSlot).
type HTTPBasic struct {
	path string
	log  *zap.Logger

	mu        sync.Mutex
	users     map[string][]byte
	stamp     fileStamp
	checked   time.Time
	dummy     []byte // bcrypt hash of a random password, compared for unknown users
	dummyCost int
	loads     uint64        // how many times the file took effect
	loaded    chan struct{} // closed (and replaced) when the file takes effect
	known     map[[sha256.Size]byte]struct{}
	cacheKey  []byte

	slots chan struct{} // one per running comparison
	queue chan struct{} // one per comparison running or waiting
}

type fileStamp struct {
	mod  time.Time
	size int64
	ino  uint64
}

func stampOf(st os.FileInfo) fileStamp {
	s := fileStamp{mod: st.ModTime(), size: st.Size()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		s.ino = sys.Ino
	}
	return s
}

// NewHTTPBasic loads the htpasswd file at path.
func NewHTTPBasic(path string, log *zap.Logger) (*HTTPBasic, error) {
	if path == "" {
		return nil, fmt.Errorf("auth_strategy http_basic needs http_basic_auth_user_file")
	}
	slots := max(2, runtime.GOMAXPROCS(0))
	b := &HTTPBasic{path: path, log: log, loaded: make(chan struct{}),
		slots: make(chan struct{}, slots), queue: make(chan struct{}, slots*(1+basicQueuedPerSlot))}
	b.cacheKey = make([]byte, 32)
	if _, err := rand.Read(b.cacheKey); err != nil {
		return nil, err
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("http_basic_auth_user_file: %w", err)
	}
	users, bad, err := readHtpasswd(path)
	if err != nil {
		return nil, err
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("%s: %s", path, bad[0])
	}
	if err := b.load(users, stampOf(st)); err != nil {
		return nil, err
	}
	b.checked = time.Now()
	return b, nil
}

// badLine is an htpasswd line that is not a bcrypt entry.
type badLine struct {
	line   int
	user   string
	reason string
}

func (l badLine) String() string {
	return fmt.Sprintf("line %d (user %q): %s", l.line, l.user, l.reason)
}

// readHtpasswd parses an htpasswd file: blank lines and lines without ':'
// are ignored, as Ironic does; the first entry of a user wins; lines whose
// hash is not bcrypt are returned apart (bad), in file order.
func readHtpasswd(path string) (users map[string][]byte, bad []badLine, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("http_basic_auth_user_file: %w", err)
	}
	users = map[string][]byte{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		user, hash, ok := strings.Cut(line, ":")
		if line == "" || !ok {
			continue
		}
		if !strings.HasPrefix(hash, "$2y$") && !strings.HasPrefix(hash, "$2a$") && !strings.HasPrefix(hash, "$2b$") {
			bad = append(bad, badLine{n, user, "only bcrypt digested passwords are supported (create entries with htpasswd -B)"})
			continue
		}
		if _, err := bcrypt.Cost([]byte(hash)); err != nil {
			bad = append(bad, badLine{n, user, "not a valid bcrypt hash"})
			continue
		}
		if _, dup := users[user]; !dup {
			users[user] = []byte(hash)
		}
	}
	return users, bad, sc.Err()
}

// load makes users the users in force (b.mu held, or b not shared yet): a
// new dummy hash when the median cost changed, the verified credentials
// forgotten, waiters of Reloaded woken.
func (b *HTTPBasic) load(users map[string][]byte, stamp fileStamp) error {
	cost := defaultDummyCost
	if len(users) > 0 {
		costs := make([]int, 0, len(users))
		for _, h := range users {
			c, _ := bcrypt.Cost(h)
			costs = append(costs, c)
		}
		slices.Sort(costs)
		cost = costs[len(costs)/2]
	}
	if b.dummy == nil || cost != b.dummyCost {
		secret := make([]byte, 16)
		if _, err := rand.Read(secret); err != nil {
			return err
		}
		dummy, err := bcrypt.GenerateFromPassword(secret, cost)
		if err != nil {
			return err
		}
		b.dummy, b.dummyCost = dummy, cost
	}
	b.users, b.stamp = users, stamp
	b.known = map[[sha256.Size]byte]struct{}{}
	b.loads++
	close(b.loaded)
	b.loaded = make(chan struct{})
	return nil
}

// Reloaded returns how many times the file has taken effect (1 after
// NewHTTPBasic) and a channel closed the next time it does: for tests and
// tools that wait for an edit to apply.
func (b *HTTPBasic) Reloaded() (uint64, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.loads, b.loaded
}

// refresh re-reads the file if it changed, at most once a second (b.mu held).
func (b *HTTPBasic) refresh() {
	now := time.Now()
	if now.Sub(b.checked) < time.Second {
		return
	}
	b.checked = now
	st, err := os.Stat(b.path)
	if err != nil {
		if b.stamp != (fileStamp{}) {
			b.log.Error("http_basic_auth_user_file unreadable: no user is let in until it is back", zap.Error(err))
			b.loadOrLog(map[string][]byte{}, fileStamp{})
		}
		return
	}
	stamp := stampOf(st)
	if stamp == b.stamp {
		return
	}
	users, bad, err := readHtpasswd(b.path)
	if err != nil {
		// Not recorded as seen: the next look tries again.
		b.log.Error("http_basic_auth_user_file unreadable: no user is let in until it is back", zap.Error(err))
		b.loadOrLog(map[string][]byte{}, fileStamp{})
		return
	}
	for _, l := range bad {
		b.log.Warn("http_basic_auth_user_file: line skipped", zap.String("file", b.path),
			zap.Int("line", l.line), zap.String("user", l.user), zap.String("reason", l.reason))
	}
	if b.loadOrLog(users, stamp) {
		b.log.Info("http_basic_auth_user_file reloaded", zap.Int("users", len(users)), zap.Int("skipped_lines", len(bad)))
	}
}

// loadOrLog is load, logging a failure (and keeping nobody in force then).
func (b *HTTPBasic) loadOrLog(users map[string][]byte, stamp fileStamp) bool {
	if err := b.load(users, stamp); err != nil {
		b.log.Error("http_basic_auth_user_file: reload failed: no user is let in", zap.Error(err))
		b.users, b.stamp = map[string][]byte{}, stamp
		return false
	}
	return true
}

// lookup returns the user's hash (or the dummy hash, known false), and
// whether user and password were verified before, re-reading the file if
// it changed.
func (b *HTTPBasic) lookup(user string, sum [sha256.Size]byte) (hash []byte, known, verified bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refresh()
	hash, known = b.users[user]
	if !known {
		return b.dummy, false, false
	}
	_, verified = b.known[sum]
	return hash, true, verified
}

// remember records user's credentials (sum) as verified against hash,
// unless the file changed meanwhile.
func (b *HTTPBasic) remember(user string, hash []byte, sum [sha256.Size]byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !bytes.Equal(b.users[user], hash) {
		return
	}
	if len(b.known) >= basicCacheSize {
		clear(b.known)
	}
	b.known[sum] = struct{}{}
}

// errBasicBusy is the refusal of a comparison beyond the bounds.
var errBasicBusy = &Failure{Status: http.StatusServiceUnavailable, RetryAfter: basicRetryAfter,
	Message: "Too many authentication attempts in progress; retry later."}

// compare runs one bcrypt comparison within the bounds on comparisons at a
// time: errBasicBusy when too many wait already, ctx's error if it ends
// while waiting.
func (b *HTTPBasic) compare(ctx context.Context, hash, password []byte) (bool, error) {
	select {
	case b.queue <- struct{}{}:
	default:
		return false, errBasicBusy
	}
	defer func() { <-b.queue }()
	select {
	case b.slots <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-b.slots }()
	return bcrypt.CompareHashAndPassword(hash, password) == nil, nil
}

// Authenticate implements Authenticator.
func (b *HTTPBasic) Authenticate(ctx context.Context, r *http.Request) (Credentials, error) {
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
	wrong := unauthorized(challenge, "Incorrect username or password")
	if len(password) > MaxBasicPasswordLen {
		return Credentials{}, wrong
	}
	mac := hmac.New(sha256.New, b.cacheKey)
	mac.Write([]byte(user))
	mac.Write([]byte{0})
	mac.Write([]byte(password))
	var sum [sha256.Size]byte
	mac.Sum(sum[:0])
	hash, known, verified := b.lookup(user, sum)
	if verified {
		return SystemAdmin(user), nil
	}
	// An unknown user is compared against the dummy hash, of the file's
	// median cost: the same time as a known user's wrong password, so
	// timing does not tell which user names exist.
	match, err := b.compare(ctx, hash, []byte(password))
	if err != nil {
		var f *Failure
		if errors.As(err, &f) {
			b.log.Warn("http_basic: too many authentication attempts at once; refused", zap.String("user", user))
		}
		return Credentials{}, err
	}
	if !known || !match {
		return Credentials{}, wrong
	}
	b.remember(user, hash, sum)
	return SystemAdmin(user), nil
}
