package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/metalloc/metalloc/db"
	"github.com/metalloc/metalloc/db/embedded"
	"github.com/metalloc/metalloc/devstack"
)

func upCmd() *cobra.Command {
	var nodes, listen, placementListen, backend string
	var conductors int
	c := &cobra.Command{
		Use:   "up",
		Short: "start the whole system locally until Ctrl-C: PostgreSQL, migrations, API, conductors, sample nodes",
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, log, err := load(cmd)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			url, stopDB, err := embedded.WithDatabase(ctx, log)
			if err != nil {
				return err
			}
			defer stopDB()
			if _, err := db.Migrate(ctx, url, log); err != nil {
				return err
			}
			if backend == "placement" && placementListen == "off" {
				return errors.New("--backend placement needs metalloc-placement: drop --placement-listen off")
			}
			stack, err := devstack.Start(ctx, devstack.Options{
				DatabaseURL: url, Conductors: conductors, APIListen: listen, Log: log,
				Placement: placementListen != "off", PlacementListen: placementListen,
				AllocationBackend: backend,
			})
			if err != nil {
				return err
			}
			defer stack.Stop(cmd.Context())
			if nodes != "" {
				if err := importNodes(ctx, url, nodes, true, log); err != nil {
					return err
				}
			}
			fmt.Printf(`
metalloc is up.
  API:       %[1]s   (Ironic API, microversions 1.1-1.82)
  placement: %[4]s   (Placement API, microversions 1.0-1.39; token "admin")
  backend:   %[5]s
  database:  %[2]s
  logs:      %[3]s

Try:
  curl -s -X POST %[1]s/v1/allocations \
    -H 'X-OpenStack-Ironic-API-Version: 1.82' -H 'Content-Type: application/json' \
    -d '{"resource_class": "baremetal-gold", "traits": ["CUSTOM_NVME"], "name": "my-first"}'
  curl -s -H 'X-OpenStack-Ironic-API-Version: 1.82' %[1]s/v1/allocations/my-first

  openstack --os-auth-type none --os-endpoint %[1]s baremetal allocation create \
    --resource-class baremetal-gold --trait CUSTOM_NVME --wait 60

  openstack --os-auth-type admin_token --os-token admin --os-endpoint %[4]s \
    --os-placement-api-version 1.39 resource provider list

Ctrl-C stops everything.
`, stack.APIURL, url, stack.API.LogPath[:len(stack.API.LogPath)-len("/api.log")], placementURL(stack),
				backendName(backend))
			<-ctx.Done()
			fmt.Println("\nstopping...")
			return nil
		},
	}
	c.Flags().StringVar(&nodes, "nodes", "", "node file to import and make available (openstack baremetal create format)")
	c.Flags().StringVar(&listen, "listen", "127.0.0.1:6385", "API address:port")
	c.Flags().IntVar(&conductors, "conductors", 2, "conductors to start")
	c.Flags().StringVar(&placementListen, "placement-listen", "127.0.0.1:8778", "metalloc-placement address:port, or off")
	c.Flags().StringVar(&backend, "backend", "database", "conductors' allocation backend: database, or placement (through this metalloc-placement)")
	return c
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
