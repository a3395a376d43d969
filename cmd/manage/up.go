package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	neturl "net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/embedded"
	"github.com/metalloc/metalloc/devstack"
	"github.com/metalloc/metalloc/examples"
	"github.com/metalloc/metalloc/internal/patroni"
)

// sampleNodes is the --nodes value that imports the sample fleet built
// into the binary (examples/dc1-nodes.yaml, what the documentation uses).
const sampleNodes = "sample"

// upPorts are dev up's listeners, each moved by one flag (and one make
// run variable, its name in capitals with _ for -): api-port,
// placement-port, pg-port and metrics-port.
type upPorts struct {
	api, placement   string // address:port; placement "off" when not started
	pg, metrics      int    // 0: a free port (pg: none with DATABASE_URL)
	ironic           int    // --ironic's API port, 0 for a free one; -1: no Ironic
	conductors       int
	listen, plListen string // the older --listen and --placement-listen
}

// resolve turns the flags into addresses and refuses, before anything
// starts, a port out of range, one given twice, one of those flags with
// its older spelling, --pg-port with DATABASE_URL, or a port another
// process holds (naming it).
func (p *upPorts) resolve(cmd *cobra.Command, apiPort int, placementPort string) error {
	f := cmd.Flags()
	for _, pair := range [][2]string{{"listen", "api-port"}, {"placement-listen", "placement-port"}} {
		if f.Changed(pair[0]) && f.Changed(pair[1]) {
			return fmt.Errorf("--%s and --%s set the same listener: give only --%s", pair[0], pair[1], pair[1])
		}
	}
	if p.conductors < 0 {
		return fmt.Errorf("--conductors %d: give 0 or more", p.conductors)
	}
	p.api = "127.0.0.1:" + strconv.Itoa(apiPort)
	if f.Changed("listen") {
		p.api = p.listen
	} else if err := checkPort("--api-port", apiPort, false); err != nil {
		return err
	}
	switch {
	case f.Changed("placement-listen"):
		p.placement = p.plListen
	case placementPort == "off":
		p.placement = "off"
	default:
		n, err := strconv.Atoi(placementPort)
		if err != nil {
			return fmt.Errorf("--placement-port %q: a port number, or off", placementPort)
		}
		if err := checkPort("--placement-port", n, false); err != nil {
			return err
		}
		p.placement = "127.0.0.1:" + placementPort
	}
	if err := checkPort("--pg-port", p.pg, true); err != nil {
		return err
	}
	if p.pg != 0 && os.Getenv("DATABASE_URL") != "" {
		return fmt.Errorf("--pg-port %d is the private PostgreSQL's port, and with DATABASE_URL set none starts: unset one of them", p.pg)
	}
	if err := checkPort("--metrics-port", p.metrics, true); err != nil {
		return err
	}
	if p.ironic >= 0 {
		if err := checkPort("--ironic-port", p.ironic, true); err != nil {
			return err
		}
	}
	if p.metrics != 0 && p.metrics+p.conductors-1 > 65535 {
		return fmt.Errorf("--metrics-port %d: %d conductors need ports up to %d", p.metrics, p.conductors, p.metrics+p.conductors-1)
	}
	return p.checkFree()
}

// checkPort refuses a port outside 1-65535 (0 too when zeroOK: a free
// port).
func checkPort(flag string, port int, zeroOK bool) error {
	switch {
	case port == 0 && zeroOK, port > 0 && port <= 65535:
		return nil
	case zeroOK:
		return fmt.Errorf("%s %d: a port is 1-65535, or 0 for a free one", flag, port)
	}
	return fmt.Errorf("%s %d: a port is 1-65535", flag, port)
}

// checkFree fails when two listeners would share a port, or when one of
// them is taken now (devstack.CheckFree names its holder).
func (p *upPorts) checkFree() error {
	type listener struct{ what, addr string }
	all := []listener{{"metalloc-api", p.api}}
	if p.placement != "off" {
		all = append(all, listener{"metalloc-placement", p.placement})
	}
	if p.pg != 0 {
		all = append(all, listener{"PostgreSQL", "127.0.0.1:" + strconv.Itoa(p.pg)})
	}
	if p.ironic > 0 {
		all = append(all, listener{"Ironic's API", "127.0.0.1:" + strconv.Itoa(p.ironic)})
	}
	for i := range p.conductors {
		if p.metrics != 0 {
			all = append(all, listener{fmt.Sprintf("conductor-%d's metrics", i+1), "127.0.0.1:" + strconv.Itoa(p.metrics+i)})
		}
	}
	byPort := map[string]string{}
	for _, l := range all {
		_, port, err := net.SplitHostPort(l.addr)
		if err != nil {
			return fmt.Errorf("%s: %q is not address:port", l.what, l.addr)
		}
		if other, dup := byPort[port]; dup {
			return fmt.Errorf("%s and %s would both listen on port %s: give each its own", other, l.what, port)
		}
		byPort[port] = l.what
	}
	for _, l := range all {
		if err := devstack.CheckFree(l.what, l.addr); err != nil {
			return err
		}
	}
	return nil
}

func upCmd() *cobra.Command {
	var nodes, placementPort, backend, envFile string
	var apiPort, haMembers, ironicPort int
	var ha, withIronic bool
	ports := upPorts{}
	c := &cobra.Command{
		Use:   "up",
		Short: "start the whole system locally until Ctrl-C: PostgreSQL, migrations, API, conductors, sample nodes",
		Long: "Starts a private PostgreSQL (or uses $DATABASE_URL), migrates it, starts metalloc-api,\n" +
			"metalloc-placement and the conductors, imports --nodes and prints what listens where. It writes the\n" +
			"environment a second shell needs (DATABASE_URL, PATH) to --env-file, which\n" +
			"`metalloc-manage dev env` prints. Ctrl-C stops everything and deletes the private\n" +
			"PostgreSQL with all its data. Every listener is on 127.0.0.1, on the port of its flag\n" +
			"(make run: API_PORT, PLACEMENT_PORT, PG_PORT, METRICS_PORT). --ha starts PostgreSQL as\n" +
			"docs/operations.md (\"PostgreSQL high availability\") lays it out: three etcd members and\n" +
			"--ha-members PostgreSQL members under Patroni in synchronous mode (Debian's etcd-server and\n" +
			"patroni packages), the daemons on the members' multi-host URL. --ironic puts metalloc in\n" +
			"front of a real Ironic 21.4 (Debian's packages, installed when missing) on --ironic-port,\n" +
			"with --nodes enrolled in Ironic instead of imported (docs/ironic.md); Ctrl-C stops it too\n" +
			"and deletes its database and state.",
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
			case ha && cmd.Flags().Changed("pg-port"):
				return errors.New("--pg-port is the private PostgreSQL's; --ha's members take free ports (dev up prints them)")
			case !withIronic && cmd.Flags().Changed("ironic-port"):
				return errors.New("--ironic-port needs --ironic (make run IRONIC=1)")
			case withIronic && ha:
				return errors.New("--ironic and --ha together are not supported: Ironic's database needs one PostgreSQL server")
			}
			// Read the node file first: a wrong path fails before anything starts.
			var nodeFile []byte
			switch nodes {
			case "":
			case sampleNodes:
				nodeFile = examples.DC1Nodes
			default:
				if nodeFile, err = os.ReadFile(nodes); err != nil {
					hint := ""
					if errors.Is(err, fs.ErrNotExist) {
						hint = " (make run NODES=FILE chooses another node file; NODES=sample imports the sample fleet built in)"
					}
					return fmt.Errorf("node file: %w%s", err, hint)
				}
			}
			var fleet []devstack.IronicNode
			ports.ironic = -1
			if withIronic {
				ports.ironic = ironicPort
				if nodeFile != nil {
					if fleet, err = devstack.ParseIronicNodes(nodeFile); err != nil {
						return fmt.Errorf("%s: %w", nodes, err)
					}
				}
			}
			if err := ports.resolve(cmd, apiPort, placementPort); err != nil {
				return err
			}
			if backend == "placement" && ports.placement == "off" {
				return errors.New("--backend placement needs metalloc-placement: drop --placement-port off")
			}
			if envFile == "" {
				if envFile, err = defaultEnvFile(); err != nil {
					return err
				}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			steps := newSteps()
			if withIronic && !devstack.IronicInstalled() {
				steps.start("installing Ironic 21.4 from Debian's packages (" + devstack.IronicPackages + ")")
				if err := devstack.EnsureIronic(ctx, log); err != nil {
					return err
				}
			}
			var url, layout string
			var stopDB func()
			if ha {
				steps.start(fmt.Sprintf("starting 3 etcd members and %d PostgreSQL members under Patroni", haMembers))
				url, layout, stopDB, err = startHA(ctx, haMembers, log)
			} else {
				steps.start("starting PostgreSQL")
				url, stopDB, err = embedded.WithDatabaseOn(ctx, log, ports.pg, nil)
			}
			if err != nil {
				return err
			}
			defer stopDB()
			steps.start("applying migrations")
			if _, err := db.Migrate(ctx, url, zap.NewNop()); err != nil {
				return err
			}
			var ir *devstack.Ironic
			var env []string
			if withIronic {
				steps.start("starting Ironic 21.4 (its API and a conductor; fake-hardware)")
				if ir, err = startDevIronic(ctx, url, ports.ironic, log); err != nil {
					return err
				}
				defer func() { ir.Stop(); os.RemoveAll(ir.Dir) }() // its database, then state, configuration and logs
				if len(fleet) > 0 {
					steps.start(fmt.Sprintf("enrolling %d nodes of %s in Ironic (available, powered off)", len(fleet), nodes))
					if _, err := ir.EnrollFleet(ctx, fleet); err != nil {
						return err
					}
				}
				env = ironicEnv(ir)
			}
			steps.start(fmt.Sprintf("starting metalloc-api, %d conductors and metalloc-placement", ports.conductors))
			stack, err := devstack.Start(ctx, devstack.Options{
				DatabaseURL: url, Conductors: ports.conductors, NoConductors: ports.conductors == 0,
				ConductorMetricsPort: ports.metrics, APIListen: ports.api, Log: log,
				Placement: ports.placement != "off", PlacementListen: ports.placement,
				AllocationBackend: backend, Env: env,
			})
			if err != nil {
				return err
			}
			defer stack.Stop(cmd.Context())
			if ir != nil {
				if len(fleet) > 0 && ports.conductors > 0 {
					steps.start(fmt.Sprintf("mirroring Ironic's %d nodes into metalloc", len(fleet)))
					if err := waitIronicMirror(ctx, url, len(fleet)); err != nil {
						return err
					}
				}
			} else if nodeFile != nil {
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
  API:       %[1]s   (Ironic API, microversions 1.1-1.82)%[9]s
  placement: %[4]s   (Placement API, microversions 1.0-1.39; token "admin")
  backend:   %[5]s
  database:  %[2]s
  logs:      %[3]s

Listening (each port moved by its dev up flag, or make run variable):
%[8]s
In another shell, for metalloc-manage and DATABASE_URL:
  eval "$(%[6]s dev env)"

Try:
%[10]s
Ctrl-C stops everything%[7]s.
`, stack.APIURL, url, stack.API.LogPath[:len(stack.API.LogPath)-len("/api.log")], placementURL(stack),
				backendName(backend), manageCommand(), discardNote(ir != nil), listening(stack, url, ir),
				ironicLine(ir), tryExamples(stack, ir))
			<-ctx.Done()
			fmt.Println("\nstopping...")
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&nodes, "nodes", "", "node file to import and make available (openstack baremetal create format plus traits), or \"sample\": the sample fleet built in (examples/dc1-nodes.yaml, 240 nodes)")
	f.IntVar(&apiPort, "api-port", 6385, "metalloc-api's port on 127.0.0.1 (make run API_PORT)")
	f.StringVar(&placementPort, "placement-port", "8778", "metalloc-placement's port on 127.0.0.1, or off (make run PLACEMENT_PORT)")
	f.IntVar(&ports.pg, "pg-port", 0, "the private PostgreSQL's port on 127.0.0.1, 0 for a free one; not with DATABASE_URL (make run PG_PORT)")
	f.IntVar(&ports.metrics, "metrics-port", 0, "the first conductor's metrics port on 127.0.0.1 (/metrics, /healthz, /readyz), conductor N on this + N-1; 0 for free ones (make run METRICS_PORT)")
	f.IntVar(&ports.conductors, "conductors", 2, "conductors to start, 0 for none (make run CONDUCTORS)")
	f.StringVar(&ports.listen, "listen", "", "metalloc-api's address:port (--api-port's older form)")
	f.StringVar(&ports.plListen, "placement-listen", "", "metalloc-placement's address:port, or off (--placement-port's older form)")
	_ = f.MarkHidden("listen")
	_ = f.MarkHidden("placement-listen")
	f.StringVar(&backend, "backend", "database", "conductors' allocation backend: database, or placement (through this metalloc-placement)")
	f.StringVar(&envFile, "env-file", "", "where to write the environment of a second shell (default dev.env next to this binary; removed at exit)")
	f.BoolVar(&ha, "ha", false, "PostgreSQL under Patroni: 3 etcd members and --ha-members PostgreSQL members in synchronous mode, on 127.0.0.1")
	f.IntVar(&haMembers, "ha-members", 3, "with --ha, how many PostgreSQL members (2 or 3)")
	f.BoolVar(&withIronic, "ironic", false, "in front of a real Ironic 21.4 (Debian's packages, installed when missing): --nodes are enrolled in it as available, powered-off fake-hardware nodes, metalloc's ironic.endpoint is it (make run IRONIC=1; docs/ironic.md)")
	f.IntVar(&ironicPort, "ironic-port", 6386, "with --ironic, Ironic's API port on 127.0.0.1, 0 for a free one (make run IRONIC_PORT)")
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

// listening lists what the stack listens on, one line a port, with the
// flag that moves it: what a user whose ports are taken needs to know.
func listening(s *devstack.Stack, url string, ir *devstack.Ironic) string {
	var b strings.Builder
	line := func(addr, what, flag string) { fmt.Fprintf(&b, "  %-21s %-51s %s\n", addr, what, flag) }
	line(strings.TrimPrefix(s.APIURL, "http://"), "metalloc-api (Ironic API)", "--api-port, API_PORT")
	if ir != nil {
		line(strings.TrimPrefix(ir.URL, "http://"), "Ironic 21.4's API (real, behind metalloc)", "--ironic-port, IRONIC_PORT")
	}
	if s.PlacementURL != "" {
		line(strings.TrimPrefix(s.PlacementURL, "http://"), "metalloc-placement (Placement API)", "--placement-port, PLACEMENT_PORT")
	}
	if os.Getenv("DATABASE_URL") == "" && !strings.Contains(url, ",") { // --ha prints its members apart
		if u, err := neturl.Parse(url); err == nil {
			line(u.Host, "PostgreSQL (private, and a unix socket)", "--pg-port, PG_PORT")
		}
	}
	for _, c := range s.Conductors {
		if u, err := neturl.Parse(c.MetricsURL); err == nil {
			line(u.Host, c.Name+" metrics (/metrics, /healthz, /readyz)", "--metrics-port, METRICS_PORT (+N-1 for conductor N)")
		}
	}
	return b.String()
}

// discardNote tells what Ctrl-C does to the data: a private PostgreSQL is
// deleted, a $DATABASE_URL is left as it is; --ironic's Ironic leaves
// nothing.
func discardNote(withIronic bool) string {
	note := " and deletes the private PostgreSQL with all its data"
	if os.Getenv("DATABASE_URL") != "" {
		note = " ($DATABASE_URL's database is kept)"
	}
	if withIronic {
		note += "; Ironic's database, state and logs are deleted"
	}
	return note
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
