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

// The budgets of bcrypt comparisons (one per check whose credentials are
// not known good or known bad already). A budget lets a number of
// comparisons run at once (slots) and queuedPerSlot times as many more wait
// for a turn; beyond that a check is refused at once with 503 and
// Retry-After: basicRetryAfter (seconds). A 503 rather than a 429:
// ironicclient and openstacksdk's baremetal proxy retry a 503 (and a 409),
// not a 429; gophercloud retries either only when told to.
//
// Checks that may well be right (a known user with no failure within
// basicFailWindow and no other check running or waiting) have the clean
// budget: max(2, GOMAXPROCS) slots and basicQueuedPerSlot. The others
// (names with a recent failure or a check in progress, unknown names) have
// the suspect budget: max(1, GOMAXPROCS/2) slots and
// basicSuspectQueuedPerSlot, so that a flood of wrong passwords or unknown
// users cannot take the places a clean login needs.
const (
	basicQueuedPerSlot        = 32
	basicSuspectQueuedPerSlot = 8
	basicRetryAfter           = 1
	basicFailWindow           = time.Minute
)

// basicCacheSize bounds each of HTTPBasic's memories: the credentials
// verified, the credentials refused (both an HMAC of user and password
// under a key of the process, never the password) and the names with
// recent failures. A memory is cleared when full; the credentials are
// also forgotten at every reload of the file.
const basicCacheSize = 4096

// basicTimings is how many of the last comparisons at the file's highest
// cost the wait of a failure is the longest of: an upper quantile rather
// than a mean, so that a failure of a low-cost user (which waits exactly
// that) is not faster than most failures of a high-cost one (which take
// their own comparison or that wait, the longer).
const basicTimings = 8

// defaultDummyCost is the cost of the dummy hash while the file has no entry.
const defaultDummyCost = bcrypt.DefaultCost

// HTTPBasic is Ironic's http_basic strategy: an Apache htpasswd file
// ("user:hash" lines, bcrypt hashes only: $2y$, $2a$, $2b$, as `htpasswd -B`
// writes them) checked against the Authorization: Basic header.
//
// The file is read at start (NewHTTPBasic fails on a missing file or a
// non-bcrypt entry, as Ironic refuses to start) and re-read at most once a
// second (on a request); it takes effect again when its content changed
// (a SHA-256 of it: an edit that keeps size and modification time, as
// `touch -r` does, counts). A reload takes effect whole: a user the new
// file no longer has is refused from then on; a line that is not a valid
// bcrypt entry (say, one `htpasswd -m` wrote) is skipped and logged with
// its line number, and the other lines take effect; a file that became
// unreadable or was removed leaves no user (logged), never the previous
// ones.
//
// As in Ironic, a missing or wrong credential is 401 with a Basic
// challenge, an undecodable header 400, and an authenticated user acts as
// SystemAdmin (Ironic checks no access rules outside keystone mode;
// metalloc-placement does the same). metalloc adds:
//
//   - Passwords over MaxBasicPasswordLen are refused (401) at once.
//   - A failed check (wrong password, unknown user) answers no sooner than
//     a comparison at the file's highest bcrypt cost takes (the longest of
//     the last basicTimings such comparisons), whatever the user's own
//     cost: an unknown user is compared against a dummy hash of that cost,
//     and a cheaper user's failure waits out the difference without
//     holding a slot; so the time of a failure does not tell which users
//     exist (htpasswd -B writes cost 5; -C sets up to 17). A success
//     answers as soon as its comparison ends.
//   - Credentials that passed are remembered and skip the comparison; so
//     are credentials that failed (answered after the same wait, with no
//     comparison), both until the file changes. Checks of the same user
//     and password at the same time share one comparison.
//   - Comparisons run within two budgets (see basicQueuedPerSlot). The
//     clean one is for a known user with no failure within
//     basicFailWindow and no other check in progress, so a new login of
//     such a user is not refused because of wrong passwords or unknown
//     users, however many arrive. The rule for the user under attack: its
//     own new logins share the suspect budget with the wrong passwords
//     tried for it; while different wrong passwords for that user keep
//     arriving, its new logins may be refused with 503 until they stop
//     (one wrong password repeated costs nothing and does not refuse
//     them). Credentials verified before keep passing.
//   - An unknown name is refused with 503 only where a known name with the
//     same history (a recent failure, a check in progress) would be: with
//     the suspect budget full, an unknown name with neither gets its 401
//     without a comparison, as a known one would be compared in the clean
//     budget.
type HTTPBasic struct {
	path string
	log  *zap.Logger

	mu        sync.Mutex
	users     map[string][]byte
	present   bool              // the file was read and took effect
	content   [sha256.Size]byte // SHA-256 of the file in force, when present
	checked   time.Time
	dummy     []byte                         // bcrypt hash of a random password, compared for unknown users
	dummyCost int                            // the highest cost of the file's entries
	compared  [basicTimings]time.Duration    // the last comparisons at dummyCost
	nextCmp   int                            // where the next one goes in compared
	loads     uint64                         // how many times the file took effect
	loaded    chan struct{}                  // closed (and replaced) when the file takes effect
	known     map[[sha256.Size]byte]struct{} // credentials verified
	refused   map[[sha256.Size]byte]struct{} // credentials that failed
	failed    map[string]time.Time           // names with failures: the last one
	checking  map[string]int                 // names: checks running or waiting
	flights   map[basicFlightKey]*basicFlight
	cacheKey  []byte

	clean, suspect basicBudget
}

// basicBudget bounds comparisons: one token in slots per running
// comparison, one in queue per comparison running or waiting.
type basicBudget struct {
	slots chan struct{}
	queue chan struct{}
}

func newBasicBudget(slots, queuedPerSlot int) basicBudget {
	return basicBudget{slots: make(chan struct{}, slots), queue: make(chan struct{}, slots*(1+queuedPerSlot))}
}

// basicFlightKey names one comparison that concurrent checks of the same
// credentials (sum) against the same file (gen) share.
type basicFlightKey struct {
	sum [sha256.Size]byte
	gen uint64
}

type basicFlight struct {
	done  chan struct{} // closed when match and err are set
	match bool
	err   error
}

// NewHTTPBasic loads the htpasswd file at path.
func NewHTTPBasic(path string, log *zap.Logger) (*HTTPBasic, error) {
	if path == "" {
		return nil, fmt.Errorf("auth_strategy http_basic needs http_basic_auth_user_file")
	}
	procs := runtime.GOMAXPROCS(0)
	b := &HTTPBasic{path: path, log: log, loaded: make(chan struct{}),
		failed: map[string]time.Time{}, checking: map[string]int{}, flights: map[basicFlightKey]*basicFlight{},
		clean:   newBasicBudget(max(2, procs), basicQueuedPerSlot),
		suspect: newBasicBudget(max(1, procs/2), basicSuspectQueuedPerSlot)}
	b.cacheKey = make([]byte, 32)
	if _, err := rand.Read(b.cacheKey); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("http_basic_auth_user_file: %w", err)
	}
	users, bad, err := parseHtpasswd(data)
	if err != nil {
		return nil, err
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("%s: %s", path, bad[0])
	}
	if err := b.load(users, sha256.Sum256(data)); err != nil {
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

// parseHtpasswd parses an htpasswd file: blank lines and lines without ':'
// are ignored, as Ironic does; the first entry of a user wins; lines whose
// hash is not bcrypt are returned apart (bad), in file order.
func parseHtpasswd(data []byte) (users map[string][]byte, bad []badLine, err error) {
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

// load makes users the users in force, read from a file whose SHA-256 is
// content (b.mu held, or b not shared yet): a new dummy hash when the
// highest cost changed (its making, which costs what a comparison does, is
// the first measure of the wait of a failure), the credentials remembered
// forgotten, waiters of Reloaded woken.
func (b *HTTPBasic) load(users map[string][]byte, content [sha256.Size]byte) error {
	cost := defaultDummyCost
	if len(users) > 0 {
		cost = bcrypt.MinCost
		for _, h := range users {
			c, _ := bcrypt.Cost(h)
			cost = max(cost, c)
		}
	}
	if b.dummy == nil || cost != b.dummyCost {
		secret := make([]byte, 16)
		if _, err := rand.Read(secret); err != nil {
			return err
		}
		start := time.Now()
		dummy, err := bcrypt.GenerateFromPassword(secret, cost)
		if err != nil {
			return err
		}
		b.dummy, b.dummyCost = dummy, cost
		for i := range b.compared {
			b.compared[i] = time.Since(start)
		}
	}
	b.users, b.present, b.content = users, true, content
	b.known = map[[sha256.Size]byte]struct{}{}
	b.refused = map[[sha256.Size]byte]struct{}{}
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

// refresh re-reads the file, at most once a second, and loads it if its
// content changed (b.mu held).
func (b *HTTPBasic) refresh() {
	now := time.Now()
	if now.Sub(b.checked) < time.Second {
		return
	}
	b.checked = now
	data, err := os.ReadFile(b.path)
	if err != nil {
		if b.present {
			b.log.Error("http_basic_auth_user_file unreadable: no user is let in until it is back", zap.Error(err))
			b.loadOrLog(map[string][]byte{}, [sha256.Size]byte{})
			b.present = false // the next read that succeeds loads the file
		}
		return
	}
	content := sha256.Sum256(data)
	if b.present && content == b.content {
		return
	}
	users, bad, err := parseHtpasswd(data)
	if err != nil {
		// Not recorded as seen: the next look tries again.
		b.log.Error("http_basic_auth_user_file unreadable: no user is let in until it is back", zap.Error(err))
		b.loadOrLog(map[string][]byte{}, [sha256.Size]byte{})
		b.present = false
		return
	}
	for _, l := range bad {
		b.log.Warn("http_basic_auth_user_file: line skipped", zap.String("file", b.path),
			zap.Int("line", l.line), zap.String("user", l.user), zap.String("reason", l.reason))
	}
	if b.loadOrLog(users, content) {
		b.log.Info("http_basic_auth_user_file reloaded", zap.Int("users", len(users)), zap.Int("skipped_lines", len(bad)))
	}
}

// loadOrLog is load, logging a failure (and keeping nobody in force then,
// until the next read retries).
func (b *HTTPBasic) loadOrLog(users map[string][]byte, content [sha256.Size]byte) bool {
	if err := b.load(users, content); err != nil {
		b.log.Error("http_basic_auth_user_file: reload failed: no user is let in", zap.Error(err))
		b.users, b.present = map[string][]byte{}, false
		clear(b.known)
		return false
	}
	return true
}

// basicLookup is what HTTPBasic knows of a user and password before any
// comparison.
type basicLookup struct {
	hash     []byte // the user's hash, or the dummy hash for an unknown user
	known    bool   // the user is in the file
	verified bool   // these credentials passed before
	refused  bool   // these credentials failed before
	gen      uint64 // the load of the file answering
}

// lookup returns what is known of user and the credentials' HMAC sum,
// re-reading the file if it changed.
func (b *HTTPBasic) lookup(user string, sum [sha256.Size]byte) basicLookup {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refresh()
	l := basicLookup{gen: b.loads}
	l.hash, l.known = b.users[user]
	if !l.known {
		l.hash = b.dummy
	} else {
		_, l.verified = b.known[sum]
	}
	_, l.refused = b.refused[sum]
	return l
}

// remember records credentials (sum) in m (b.known or b.refused) unless
// the file took effect again since gen (b.mu held).
func (b *HTTPBasic) remember(m map[[sha256.Size]byte]struct{}, sum [sha256.Size]byte, gen uint64) {
	if gen != b.loads {
		return
	}
	if len(m) >= basicCacheSize {
		clear(m)
	}
	m[sum] = struct{}{}
}

// failure records a failed check of user (credentials sum) and returns the
// shortest time a failed check takes: the longest of the last basicTimings
// comparisons at the file's highest cost.
func (b *HTTPBasic) failure(user string, sum [sha256.Size]byte, gen uint64) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.remember(b.refused, sum, gen)
	if len(b.failed) >= basicCacheSize {
		clear(b.failed)
	}
	b.failed[user] = time.Now()
	return slices.Max(b.compared[:])
}

// measured records how long a comparison against hash took, when hash has
// the file's highest cost.
func (b *HTTPBasic) measured(hash []byte, d time.Duration) {
	cost, err := bcrypt.Cost(hash)
	if err != nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if cost != b.dummyCost {
		return
	}
	b.compared[b.nextCmp] = d
	b.nextCmp = (b.nextCmp + 1) % basicTimings
}

// errBasicBusy is the refusal of a comparison beyond the budgets.
var errBasicBusy = &Failure{Status: http.StatusServiceUnavailable, RetryAfter: basicRetryAfter,
	Message: "Too many authentication attempts in progress; retry later."}

// compare runs one bcrypt comparison within budget g: errBasicBusy when
// too many wait already, ctx's error if it ends while waiting.
func (b *HTTPBasic) compare(ctx context.Context, g basicBudget, hash, password []byte) (bool, error) {
	select {
	case g.queue <- struct{}{}:
	default:
		return false, errBasicBusy
	}
	defer func() { <-g.queue }()
	select {
	case g.slots <- struct{}{}:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	start := time.Now()
	match := bcrypt.CompareHashAndPassword(hash, password) == nil
	d := time.Since(start)
	<-g.slots
	b.measured(hash, d)
	return match, nil
}

// check compares password with l.hash for user, sharing the comparison
// with concurrent checks of the same credentials (sum) against the same
// file, in the budget the user's recent history calls for. An unknown user
// never matches.
func (b *HTTPBasic) check(ctx context.Context, user string, sum [sha256.Size]byte, l basicLookup, password []byte) (bool, error) {
	key := basicFlightKey{sum, l.gen}
	for {
		b.mu.Lock()
		f, shared := b.flights[key]
		if shared {
			b.mu.Unlock()
			select {
			case <-f.done:
			case <-ctx.Done():
				return false, ctx.Err()
			}
			if errors.Is(f.err, context.Canceled) || errors.Is(f.err, context.DeadlineExceeded) {
				continue // the request that compared ended; ours has not
			}
			return f.match, f.err
		}
		f = &basicFlight{done: make(chan struct{})}
		b.flights[key] = f
		last, failed := b.failed[user]
		suspect := b.checking[user] > 0 || failed && time.Since(last) < basicFailWindow
		b.checking[user]++
		b.mu.Unlock()

		switch {
		case l.known && !suspect:
			f.match, f.err = b.compare(ctx, b.clean, l.hash, password)
		case !l.known && !suspect:
			// As a known user's would be, this check is not refused:
			// with no room in the suspect budget it fails without a
			// comparison (the wait of a failure still applies).
			f.match, f.err = b.compare(ctx, b.suspect, l.hash, password)
			if f.err == errBasicBusy {
				f.err = nil
			}
		default:
			f.match, f.err = b.compare(ctx, b.suspect, l.hash, password)
		}
		f.match = f.match && l.known

		b.mu.Lock()
		delete(b.flights, key)
		if b.checking[user]--; b.checking[user] == 0 {
			delete(b.checking, user)
		}
		b.mu.Unlock()
		close(f.done)
		return f.match, f.err
	}
}

// Authenticate implements Authenticator.
func (b *HTTPBasic) Authenticate(ctx context.Context, r *http.Request) (Credentials, error) {
	start := time.Now()
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
	l := b.lookup(user, sum)
	if l.verified {
		return SystemAdmin(user), nil
	}
	match := false
	if !l.refused {
		match, err = b.check(ctx, user, sum, l, []byte(password))
		if err != nil {
			var f *Failure
			if errors.As(err, &f) {
				b.log.Warn("http_basic: too many authentication attempts at once; refused", zap.String("user", user))
			}
			return Credentials{}, err
		}
	}
	if match {
		b.mu.Lock()
		b.remember(b.known, sum, l.gen)
		b.mu.Unlock()
		return SystemAdmin(user), nil
	}
	// Every failure takes as long as a comparison at the file's highest
	// cost, so that its time does not tell an unknown user from a known
	// one of a lower cost; the wait holds no slot. A request that ends
	// meanwhile is answered at once: nobody reads that answer.
	floor := b.failure(user, sum, l.gen)
	if wait := time.Until(start.Add(floor)); wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return Credentials{}, wrong
}
