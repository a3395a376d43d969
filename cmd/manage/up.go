package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/embedded"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/internal/patroni"
)

// sampleNodes is the --nodes value that imports devstack.SampleNodes.
const sampleNodes = "sample"

func upCmd() *cobra.Command {
	var nodes, listen, placementListen, backend, envFile string
	var conductors, haMembers int
	var ha bool
	c := &cobra.Command{
		Use:   "up",
		Short: "start the whole system locally until Ctrl-C: PostgreSQL, migrations, API, conductors, sample nodes",
		Long: "Starts a private PostgreSQL (or uses $DATABASE_URL), migrates it, starts metalloc-api,\n" +
			"metalloc-placement and the conductors, imports --nodes and prints the URLs. It writes the\n" +
			"environment a second shell needs (DATABASE_URL, PATH) to --env-file, which\n" +
			"`metalloc-manage dev env` prints. Ctrl-C stops everything and deletes the private\n" +
			"PostgreSQL with all its data. --ha starts PostgreSQL as docs/operations.md (\"PostgreSQL high\n" +
			"availability\") lays it out: three etcd members and --ha-members PostgreSQL members under\n" +
			"Patroni in synchronous mode (Debian's etcd-server and patroni packages), the daemons on\n" +
			"the members' multi-host URL.",
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, log, err := load(cmd)
			if err != nil {
				return err
			}
			// Wrong flags fail before anything starts.
			switch {
			case !ha && cmd.Flags().Changed("ha-members"):
				return errors.New("--ha-members needs --ha")
			case ha && os.Getenv("DATABASE_URL") != "":
				return errors.New("--ha starts its own PostgreSQL members: unset DATABASE_URL")
			}
			// Read the node file first: a wrong path fails before anything starts.
			var nodeFile []byte
			switch nodes {
			case "":
			case sampleNodes:
				nodeFile = devstack.SampleNodes(240)
			default:
				if nodeFile, err = os.ReadFile(nodes); err != nil {
					hint := ""
					if errors.Is(err, fs.ErrNotExist) {
						hint = " (make run NODES=FILE chooses another node file; NODES=sample generates 240 sample nodes)"
					}
					return fmt.Errorf("node file: %w%s", err, hint)
				}
			}
			if backend == "placement" && placementListen == "off" {
				return errors.New("--backend placement needs metalloc-placement: drop --placement-listen off")
			}
			if err := devstack.CheckFree("metalloc-api", listen); err != nil {
				return err
			}
			if placementListen != "off" {
				if err := devstack.CheckFree("metalloc-placement", placementListen); err != nil {
					return err
				}
			}
			if envFile == "" {
				if envFile, err = defaultEnvFile(); err != nil {
					return err
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			steps := newSteps()
			var url, layout string
			var stopDB func()
			if ha {
				steps.start(fmt.Sprintf("starting 3 etcd members and %d PostgreSQL members under Patroni", haMembers))
				url, layout, stopDB, err = startHA(ctx, haMembers, log)
			} else {
				steps.start("starting PostgreSQL")
				url, stopDB, err = embedded.WithDatabase(ctx, log, nil)
			}
			if err != nil {
				return err
			}
			defer stopDB()
			steps.start("applying migrations")
			if _, err := db.Migrate(ctx, url, zap.NewNop()); err != nil {
				return err
			}
			steps.start(fmt.Sprintf("starting metalloc-api, %d conductors and metalloc-placement", conductors))
			stack, err := devstack.Start(ctx, devstack.Options{
				DatabaseURL: url, Conductors: conductors, APIListen: listen, Log: log,
				Placement: placementListen != "off", PlacementListen: placementListen,
				AllocationBackend: backend,
			})
			if err != nil {
				return err
			}
			defer stack.Stop(cmd.Context())
			if nodeFile != nil {
				steps.start("importing nodes from " + nodes)
				if err := importFrom(ctx, url, bytes.NewReader(nodeFile), nodes, importOptions{available: true, waitPlacement: true}, log); err != nil {
					return err
				}
			}
			if err := writeDevEnv(envFile, stack, url); err != nil {
				return err
			}
			defer os.Remove(envFile)
			steps.done()
			fmt.Print(layout)
			fmt.Printf(`
metalloc is up.
  API:       %[1]s   (Ironic API, microversions 1.1-1.82)
  placement: %[4]s   (Placement API, microversions 1.0-1.39; token "admin")
  backend:   %[5]s
  database:  %[2]s
  logs:      %[3]s

In another shell, for metalloc-manage and DATABASE_URL:
  eval "$(%[6]s dev env)"

Try:
  curl -s -X POST %[1]s/v1/allocations \
    -H 'X-OpenStack-Ironic-API-Version: 1.82' -H 'Content-Type: application/json' \
    -d '{"resource_class": "baremetal-gold", "traits": ["CUSTOM_NVME"], "name": "my-first"}'
  curl -s -H 'X-OpenStack-Ironic-API-Version: 1.82' %[1]s/v1/allocations/my-first

  openstack --os-auth-type none --os-endpoint %[1]s baremetal allocation create \
    --resource-class baremetal-gold --trait CUSTOM_NVME --wait 60

  openstack --os-auth-type admin_token --os-token admin --os-endpoint %[4]s \
    --os-placement-api-version 1.39 resource provider list

Ctrl-C stops everything%[7]s.
`, stack.APIURL, url, stack.API.LogPath[:len(stack.API.LogPath)-len("/api.log")], placementURL(stack),
				backendName(backend), manageCommand(), discardNote())
			<-ctx.Done()
			fmt.Println("\nstopping...")
			return nil
		},
	}
	c.Flags().StringVar(&nodes, "nodes", "", "node file to import and make available (openstack baremetal create format), or \"sample\": 240 generated nodes")
	c.Flags().StringVar(&listen, "listen", "127.0.0.1:6385", "API address:port")
	c.Flags().IntVar(&conductors, "conductors", 2, "conductors to start")
	c.Flags().StringVar(&placementListen, "placement-listen", "127.0.0.1:8778", "metalloc-placement address:port, or off")
	c.Flags().StringVar(&backend, "backend", "database", "conductors' allocation backend: database, or placement (through this metalloc-placement)")
	c.Flags().BoolVar(&ha, "ha", false, "PostgreSQL under Patroni: 3 etcd members and --ha-members PostgreSQL members in synchronous mode, on 127.0.0.1")
	c.Flags().IntVar(&haMembers, "ha-members", 3, "with --ha, how many PostgreSQL members (2 or 3)")
	c.Flags().StringVar(&envFile, "env-file", "", "where to write the environment of a second shell (default dev.env next to this binary; removed at exit)")
	return c
}

// startHA starts the Patroni cluster of dev up --ha with members
// PostgreSQL members, and returns the database's multi-host URL, the
// lines that say what listens where, and the function that stops it all
// and deletes the data.
func startHA(ctx context.Context, members int, log *zap.Logger) (url, layout string, stop func(), err error) {
	c, err := patroni.Start(ctx, patroni.Options{Members: members, Log: log})
	if err != nil {
		return "", "", nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nPostgreSQL under Patroni (synchronous mode; data and logs in %s):\n", c.Dir())
	fmt.Fprintf(&b, "  etcd:      %s\n", strings.Join(c.EtcdURLs, " "))
	primary := c.Primary(ctx)
	for _, m := range c.Members {
		role := "standby"
		if m == primary {
			role = "primary"
		}
		fmt.Fprintf(&b, "  %-10s PostgreSQL 127.0.0.1:%d, Patroni REST %s (%s; curl %s/cluster)\n",
			m.Name+":", m.Port, m.RESTURL, role, m.RESTURL)
	}
	return c.URL("metalloc"), b.String(), c.Stop, nil
}

// discardNote tells what Ctrl-C does to the data: a private PostgreSQL is
// deleted, a $DATABASE_URL is left as it is.
func discardNote() string {
	if os.Getenv("DATABASE_URL") != "" {
		return " ($DATABASE_URL's database is kept)"
	}
	return " and deletes the private PostgreSQL with all its data"
}

// steps prints one line per start-up step with the time the previous one
// took, so that a slow first start says what it is doing.
type steps struct {
	t0, t time.Time
	name  string
}

func newSteps() *steps { now := time.Now(); return &steps{t0: now, t: now} }

func (s *steps) start(name string) {
	s.finish()
	s.name, s.t = name, time.Now()
	fmt.Fprintf(os.Stderr, "dev up: %s...\n", name)
}

func (s *steps) finish() {
	if s.name != "" {
		fmt.Fprintf(os.Stderr, "dev up: %s: done in %.1fs\n", s.name, time.Since(s.t).Seconds())
	}
}

func (s *steps) done() {
	s.finish()
	fmt.Fprintf(os.Stderr, "dev up: up in %.1fs\n", time.Since(s.t0).Seconds())
}

func backendName(b string) string {
	if b == "placement" {
		return "placement (conductors allocate through metalloc-placement; nodes are mirrored as resource providers)"
	}
	return b + " (conductors reserve nodes in PostgreSQL)"
}

func placementURL(s *devstack.Stack) string {
	if s.PlacementURL == "" {
		return "(off)"
	}
	return s.PlacementURL
}
