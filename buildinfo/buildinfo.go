// Package buildinfo says which metalloc a binary is: its version, the
// commit it was built from, when, and with which Go. `make build` stamps
// version, commit and date with -ldflags -X (see the Makefile); a plain `go
// build` in a git checkout still gets the commit and its time from the Go
// toolchain's VCS stamping (runtime/debug.ReadBuildInfo). Every binary
// prints it for --version, logs it at start-up and exports it as the
// metalloc_build_info metric.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Set by the linker: -X github.com/metalloc/metalloc/buildinfo.version=...
// (and commit, date). Empty when built without them.
var (
	version string
	commit  string
	date    string
)

// Info describes a build.
type Info struct {
	// Version is `git describe` of the build ("v0.4.0", "v0.4.0-3-gabc1234-dirty"),
	// or "dev" for a build without -ldflags.
	Version string
	// Commit is the full commit hash ("unknown" outside a git checkout),
	// with "-dirty" when the work tree had changes.
	Commit string
	// Date is when the binary was built (RFC 3339, UTC), or, without
	// -ldflags, the time of its commit; "unknown" when neither is known.
	Date string
	// GoVersion is the Go toolchain ("go1.26.8").
	GoVersion string
	// Platform is GOOS/GOARCH.
	Platform string
}

// Get returns this binary's build information.
var Get = sync.OnceValue(func() Info {
	i := Info{Version: version, Commit: commit, Date: date, GoVersion: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		var rev, at string
		dirty := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
		if i.Commit == "" && rev != "" {
			i.Commit = rev
			if dirty {
				i.Commit += "-dirty"
			}
		}
		if i.Date == "" {
			i.Date = at
		}
		if i.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			i.Version = bi.Main.Version
		}
	}
	if i.Version == "" {
		i.Version = "dev"
	}
	if i.Commit == "" {
		i.Commit = "unknown"
	}
	if i.Date == "" {
		i.Date = "unknown"
	}
	return i
})

// String is the one line --version prints after the binary's name:
// "v0.4.0 (commit 1a2b..., built 2026-12-01T10:00:00Z, go1.26.8 linux/amd64)".
func (i Info) String() string {
	return fmt.Sprintf("%s (commit %s, built %s, %s %s)", i.Version, i.Commit, i.Date, i.GoVersion, i.Platform)
}

// NewCollector returns the metalloc_build_info gauge: always 1, the build
// in its labels (version, commit, build_date, goversion), as Prometheus's
// own <name>_build_info metrics.
func NewCollector() prometheus.Collector {
	i := Get()
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "metalloc_build_info",
		Help: "Build of this metalloc binary (always 1): version, commit, build date and Go version as labels.",
		ConstLabels: prometheus.Labels{"version": i.Version, "commit": i.Commit, "build_date": i.Date,
			"goversion": i.GoVersion},
	})
	g.Set(1)
	return g
}
