package devstack

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"
)

// IronicInstalled reports whether the programs and the PostgreSQL driver
// StartIronic needs (IronicPackages) are installed.
func IronicInstalled() bool {
	for _, bin := range []string{"ironic-api", "ironic-conductor", "ironic-dbsync"} {
		if _, err := exec.LookPath(bin); err != nil {
			return false
		}
	}
	return exec.Command("/usr/bin/python3", "-c", "import psycopg2").Run() == nil
}

// EnsureIronic installs IronicPackages from Debian's archive with apt-get
// (through sudo when not root; sudo may ask for a password on the
// terminal) when IronicInstalled is false, as scripts/test-deps.sh does
// for `make test`. It takes a minute or two on a first run; apt-get's
// output goes to stderr. Errors name the command to run by hand.
func EnsureIronic(ctx context.Context, log *zap.Logger) error {
	if IronicInstalled() {
		return nil
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("Ironic 21.4 is not installed and apt-get is unavailable: install the Debian packages %s", IronicPackages)
	}
	var sudo []string
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("sudo"); err != nil {
			return fmt.Errorf("Ironic 21.4 is not installed: as root, apt-get install -y %s", IronicPackages)
		}
		sudo = []string{"sudo"}
	}
	if log != nil {
		log.Info("installing Ironic from Debian's packages", zap.String("packages", IronicPackages))
	}
	for _, args := range [][]string{{"apt-get", "update", "-q"},
		append([]string{"apt-get", "install", "-y", "-q"}, strings.Fields(IronicPackages)...)} {
		args = append(sudo, args...)
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stderr, os.Stderr // sudo may ask for a password
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("installing Ironic: %s: %w (run it by hand, then try again)", strings.Join(args, " "), err)
		}
	}
	if !IronicInstalled() {
		return fmt.Errorf("Ironic still not installed after apt-get install %s", IronicPackages)
	}
	return nil
}

// ParseIronicNodes reads a node file in the format `openstack baremetal
// create` reads, plus traits (what `metalloc-manage node import` reads,
// e.g. examples/dc1-nodes.yaml), as YAML or JSON: {"nodes": [{name, uuid,
// driver, resource_class, properties, extra, owner, traits}, ...]}. A
// driver other than fake-hardware, or anything else in the file (ports,
// port groups, chassis, other node fields), is refused, naming it: the
// Ironic of StartIronic runs fake-hardware only, and enrolling drops
// nothing silently.
func ParseIronicNodes(data []byte) ([]IronicNode, error) {
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("node file: %w", err)
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("node file: %w", err)
	}
	// An entry is an IronicNode (its JSON names) with the driver, and the
	// owner and traits that IronicNode sends apart.
	var file struct {
		Nodes []struct {
			IronicNode
			Driver string   `json:"driver"`
			Owner  string   `json:"owner"`
			Traits []string `json:"traits"`
		} `json:"nodes"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&file); err != nil {
		return nil, fmt.Errorf("node file for Ironic (nodes with name, uuid, driver fake-hardware, resource_class, owner, properties, extra, traits): %w", err)
	}
	if len(file.Nodes) == 0 {
		return nil, errors.New("node file: no nodes")
	}
	nodes := make([]IronicNode, len(file.Nodes))
	for k, n := range file.Nodes {
		if n.Driver != "" && n.Driver != "fake-hardware" {
			return nil, fmt.Errorf("node file: node %d (%s): driver %q: this Ironic runs fake-hardware only", k, n.Name, n.Driver)
		}
		nodes[k] = n.IronicNode
		nodes[k].Owner, nodes[k].Traits = n.Owner, n.Traits
	}
	return nodes, nil
}

// EnrollFleet puts nodes into Ironic as available, powered-off
// fake-hardware nodes (what Ironic allocates) and returns their uuids in
// order. The first goes through Ironic's API as an operator enrols one
// (EnrollAvailable: create, traits, manage, provide, power off); the
// others are written into Ironic's database as copies of it with their
// own uuid, name, resource class, properties, extra, owner and traits (as
// CloneNodes does): 240 nodes in about a second, where the API's five
// steps per node take minutes on a small machine.
func (i *Ironic) EnrollFleet(ctx context.Context, nodes []IronicNode) ([]string, error) {
	if len(nodes) == 0 {
		return nil, nil
	}
	first, err := i.EnrollAvailable(ctx, nodes[:1], 1)
	if err != nil {
		return nil, err
	}
	if len(nodes) == 1 {
		return first, nil
	}
	type row struct {
		UUID          string   `json:"uuid"`
		Name          *string  `json:"name"`
		ResourceClass *string  `json:"resource_class"`
		Owner         *string  `json:"owner"`
		Properties    string   `json:"properties"`
		Extra         string   `json:"extra"`
		Traits        []string `json:"traits"`
	}
	opt := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	dict := func(m map[string]any) string { // Ironic's JsonEncodedDict: JSON text
		if m == nil {
			return "{}"
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	rows := make([]row, 0, len(nodes)-1)
	for _, n := range nodes[1:] {
		r := row{UUID: n.UUID, Name: opt(n.Name), ResourceClass: opt(n.ResourceClass), Owner: opt(n.Owner),
			Properties: dict(n.Properties), Extra: dict(n.Extra), Traits: n.Traits}
		if r.Traits == nil {
			r.Traits = []string{}
		}
		rows = append(rows, r)
	}
	spec, err := json.Marshal(rows)
	if err != nil {
		return nil, err
	}
	uuids, err := i.copyNodes(ctx, first[0], spec)
	if err != nil {
		return nil, err
	}
	return append(first, uuids...), nil
}

// copyNodes inserts the nodes of spec (a JSON array of EnrollFleet's rows)
// as copies of node template in one statement, with their traits, and
// returns their uuids in order (a row without uuid gets a random one).
func (i *Ironic) copyNodes(ctx context.Context, template string, spec []byte) ([]string, error) {
	var uuids []string
	err := i.inDB(ctx, func(tx pgx.Tx) error {
		all, err := ironicNodeColumns(ctx, tx)
		if err != nil {
			return err
		}
		var cols []string
		for _, c := range all {
			switch c {
			case `"resource_class"`, `"properties"`, `"extra"`, `"owner"`:
			default:
				cols = append(cols, c)
			}
		}
		rows, err := tx.Query(ctx, `
			WITH tmpl AS (SELECT * FROM nodes WHERE uuid = $1),
			     f AS (SELECT ord, coalesce(nullif(r.uuid, ''), gen_random_uuid()::text) AS uuid, r.name,
			                  r.resource_class, r.owner, r.properties, r.extra, r.traits
			             FROM jsonb_array_elements($2::jsonb) WITH ORDINALITY AS e(doc, ord),
			                  jsonb_to_record(e.doc) AS r(uuid text, name text, resource_class text, owner text,
			                                              properties text, extra text, traits jsonb)),
			     ins AS (
			INSERT INTO nodes (uuid, name, resource_class, owner, properties, extra, created_at, `+strings.Join(cols, ", ")+`)
			SELECT f.uuid, f.name, f.resource_class, f.owner, f.properties, f.extra, now(), `+strings.Join(cols, ", ")+`
			  FROM tmpl, f ORDER BY f.ord
			RETURNING id, uuid),
			     tr AS (
			INSERT INTO node_traits (node_id, trait, created_at, version)
			SELECT ins.id, t.trait, now(), '1.0'
			  FROM ins JOIN f USING (uuid), jsonb_array_elements_text(f.traits) AS t(trait))
			SELECT ins.uuid FROM ins JOIN f USING (uuid) ORDER BY f.ord`, template, spec)
		if err != nil {
			return err
		}
		uuids, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("writing nodes into Ironic's database: %w", err)
	}
	return uuids, nil
}
