package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/devstack"
)

// startDevIronic starts the Ironic of dev up --ironic: its API on
// 127.0.0.1:port (0: a free port) and one conductor (one is enough for a
// fleet of fake-hardware nodes, and spares a small machine's CPU), noauth,
// its database on the PostgreSQL server of url, its configuration, state
// and logs in a directory of its own under $TMPDIR (the caller removes it
// after Stop).
func startDevIronic(ctx context.Context, url string, port int, log *zap.Logger) (*devstack.Ironic, error) {
	dir, err := os.MkdirTemp("", "metalloc-ironic-")
	if err != nil {
		return nil, err
	}
	ir, err := devstack.StartIronic(ctx, devstack.IronicOptions{DatabaseURL: url, Dir: dir, Port: port, Conductors: 1, Log: log})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return ir, nil
}

// ironicEnv is the environment that puts metalloc's processes in front
// of ir (docs/ironic.md's configuration, as METALLOC_* variables): its
// endpoint, noauth as Ironic has, and a full sync every 10 s instead of
// 60 s, so that a node changed directly in Ironic shows in metalloc soon.
func ironicEnv(ir *devstack.Ironic) []string {
	return []string{
		"METALLOC_IRONIC_ENDPOINT=" + ir.URL,
		"METALLOC_IRONIC_AUTH_STRATEGY=noauth",
		"METALLOC_IRONIC_SYNC_SCHEDULE=@every 10s",
	}
}

// waitIronicMirror waits until the conductors have mirrored at least n
// available nodes of Ironic's into metalloc's node table (their first
// full sync), so that allocations made once dev up says "up" find them.
// It gives up after 3 minutes, saying how many it saw.
func waitIronicMirror(ctx context.Context, url string, n int) error {
	pool, err := db.Open(ctx, url, db.PoolOptions{ApplicationName: "metalloc-manage"})
	if err != nil {
		return err
	}
	defer pool.Close()
	deadline := time.Now().Add(3 * time.Minute)
	var got int
	for {
		err := pool.QueryRow(ctx, `SELECT count(*) FROM nodes WHERE provision_state = 'available' AND power_state IS NOT NULL`).Scan(&got)
		if err == nil && got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the conductors mirrored %d of Ironic's %d nodes within 3 minutes (see the conductors' logs)", got, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ironicLine is the "metalloc is up" line naming the Ironic behind it
// (empty without --ironic).
func ironicLine(ir *devstack.Ironic) string {
	if ir == nil {
		return ""
	}
	return fmt.Sprintf("\n  Ironic:    %s   (real Ironic 21.4 behind the API: fake-hardware, noauth, %d conductor; logs %s)",
		ir.URL, len(ir.Hosts), ir.LogDir)
}

// tryExamples are the "Try:" commands dev up prints: standalone, an
// allocation with curl and the openstack CLI, and Placement's providers;
// in front of Ironic, an allocation through metalloc, the same
// allocation and its node read from Ironic directly, and a deploy
// through metalloc.
func tryExamples(s *devstack.Stack, ir *devstack.Ironic) string {
	if ir != nil {
		return strings.ReplaceAll(strings.ReplaceAll(`  openstack --os-auth-type none --os-endpoint {api} baremetal allocation create \
    --resource-class baremetal-gold --name my-first --wait 60

  NODE=$(openstack --os-auth-type none --os-endpoint {api} baremetal allocation show my-first -f value -c node_uuid)
  openstack --os-auth-type none --os-endpoint {ironic} baremetal allocation show my-first
  openstack --os-auth-type none --os-endpoint {ironic} baremetal node show $NODE -c allocation_uuid -c provision_state

  openstack --os-auth-type none --os-endpoint {api} baremetal node set $NODE --instance-info image_source=http://images.example/a.qcow2
  openstack --os-auth-type none --os-endpoint {api} baremetal node deploy $NODE --wait 120
`, "{ironic}", ir.URL), "{api}", s.APIURL)
	}
	return strings.ReplaceAll(strings.ReplaceAll(`  curl -s -X POST {api}/v1/allocations \
    -H 'X-OpenStack-Ironic-API-Version: 1.82' -H 'Content-Type: application/json' \
    -d '{"resource_class": "baremetal-gold", "traits": ["CUSTOM_NVME"], "name": "my-first"}'
  curl -s -H 'X-OpenStack-Ironic-API-Version: 1.82' {api}/v1/allocations/my-first

  openstack --os-auth-type none --os-endpoint {api} baremetal allocation create \
    --resource-class baremetal-gold --trait CUSTOM_NVME --wait 60

  openstack --os-auth-type admin_token --os-token admin --os-endpoint {placement} \
    --os-placement-api-version 1.39 resource provider list
`, "{placement}", placementURL(s)), "{api}", s.APIURL)
}
