package docs

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/metalloc/metalloc/db/dbtest"
	"github.com/metalloc/metalloc/devstack"
)

// TestBackupRestore runs docs/operations.md's backup and restore block
// (marked "run by TestBackupRestore") as written, with FROM a database
// where a stack made allocations and TO a new database on the same server:
// pg_dump, CREATE DATABASE, pg_restore, db version. Then metalloc-api and
// a conductor started on the restored database serve the old allocations
// (active, on the same nodes) and reserve a new one.
func TestBackupRestore(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	script := markedBlock(t, "docs/operations.md", "run by TestBackupRestore")
	bin := filepath.Join(workspace, "repo", "bin")
	from := dbtest.NewURL(t)

	imp := exec.Command(filepath.Join(bin, "metalloc-manage"), "node", "import", filepath.Join(repoRoot(), "examples", "dc1-nodes.yaml"))
	imp.Env = append(readerEnv(t.TempDir()), "DATABASE_URL="+from)
	if out, err := imp.CombinedOutput(); err != nil {
		t.Fatalf("node import: %v\n%s", err, out)
	}
	stack, err := devstack.Start(ctx, devstack.Options{BinDir: bin, DatabaseURL: from, Conductors: 1, LogDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	old := map[string]string{} // allocation uuid -> node uuid
	for range 3 {
		a := allocate(t, stack.APIURL)
		old[a.UUID] = a.NodeUUID
	}

	// The block's FROM and TO, and the new database's name, become the
	// test's; everything else runs as written.
	toName := "metalloc_restored_" + randomHex(t)
	to := withDatabase(t, from, toName)
	t.Cleanup(func() { dropDatabase(t, from, toName) })
	script = strings.ReplaceAll(script, "metalloc_restored", toName)
	script = regexp.MustCompile(`(?m)^FROM=.*$`).ReplaceAllString(script, "FROM="+shellQuote(from))
	script = regexp.MustCompile(`(?m)^TO=.*$`).ReplaceAllString(script, "TO="+shellQuote(to))
	cmd := exec.Command("bash", "-e", "-o", "pipefail", "-c", script)
	cmd.Dir = t.TempDir()
	cmd.Env = append(readerEnv(t.TempDir()), "PATH="+bin+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the backup and restore block failed: %v\n%s\n%s", err, indent(script), out)
	}
	if !regexp.MustCompile(`database: (\d+)\s+binary: (\d+)`).Match(out) {
		t.Errorf("db version of the restored database printed:\n%s", out)
	}
	stack.Stop(context.WithoutCancel(ctx))

	// The dump holds conductor-1 with a heartbeat as fresh as the dump; a
	// conductor of that name would register at once (no session holds its
	// liveness lock on the restored database), and so does one of another
	// name, which takes the new allocation.
	restored, err := devstack.Start(ctx, devstack.Options{BinDir: bin, DatabaseURL: to, Conductors: 1,
		ConductorPrefix: "restored-", LogDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer restored.Stop(context.WithoutCancel(ctx))
	for id, node := range old {
		var a allocationDoc
		if status := call(t, http.MethodGet, restored.APIURL+"/v1/allocations/"+id, nil, &a); status != http.StatusOK ||
			a.State != "active" || a.NodeUUID != node {
			t.Errorf("restored allocation %s: status %d, %+v; want active on node %s", id, status, a, node)
		}
	}
	if a := allocate(t, restored.APIURL); old[a.UUID] != "" {
		t.Errorf("a new allocation got an old uuid: %+v", a)
	}
}

// markedBlock returns the text of the one shell block of rel whose marker
// is marker.
func markedBlock(t *testing.T, rel, marker string) string {
	t.Helper()
	bs, err := readBlocks(repoRoot(), rel)
	if err != nil {
		t.Fatal(err)
	}
	var found []block
	for _, b := range bs {
		if b.marker == marker {
			found = append(found, b)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s has %d blocks marked %q, want 1", rel, len(found), marker)
	}
	return found[0].text
}

// allocationDoc is the part of an Ironic allocation the test reads.
type allocationDoc struct {
	UUID      string  `json:"uuid"`
	State     string  `json:"state"`
	NodeUUID  string  `json:"node_uuid"`
	LastError *string `json:"last_error"`
}

// allocate creates an allocation of baremetal-gold with Prefer: wait and
// fails unless it answers 201 active.
func allocate(t *testing.T, api string) allocationDoc {
	t.Helper()
	var a allocationDoc
	status := call(t, http.MethodPost, api+"/v1/allocations", map[string]any{"resource_class": "baremetal-gold"}, &a)
	if status != http.StatusCreated || a.State != "active" || a.NodeUUID == "" {
		t.Fatalf("POST /v1/allocations: %d %+v, want 201 active", status, a)
	}
	return a
}

// call sends an Ironic API request (microversion 1.82, waiting up to 60 s
// for an allocation to leave allocating) and decodes the answer into out.
func call(t *testing.T, method, u string, body, out any) int {
	t.Helper()
	var r *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	} else {
		r = bytes.NewReader(nil)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, u, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-OpenStack-Ironic-API-Version", "1.82")
	req.Header.Set("Prefer", "wait=60")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("%s %s: %d, body not JSON: %v", method, u, resp.StatusCode, err)
	}
	return resp.StatusCode
}

// withDatabase is the URL u with its database replaced by name.
func withDatabase(t *testing.T, u, name string) string {
	t.Helper()
	p, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	p.Path = "/" + name
	return p.String()
}

func dropDatabase(t *testing.T, server, name string) {
	conn, err := pgx.Connect(context.Background(), server)
	if err != nil {
		t.Logf("dropping %s: %v", name, err)
		return
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Logf("dropping %s: %v", name, err)
	}
}

func randomHex(t *testing.T) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
