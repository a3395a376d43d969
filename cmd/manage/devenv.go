package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/metalloc/metalloc/config"
	"github.com/metalloc/metalloc/devstack"
)

// devEnvPID is the first line's prefix of a dev env file, before dev up's pid.
const devEnvPID = "# metalloc-manage dev up, pid "

// defaultEnvFile is dev.env next to the running binary (bin/dev.env after
// make build): one per checkout, as make run's ports are.
func defaultEnvFile() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(exe), "dev.env"), nil
}

// writeDevEnv writes the environment a second shell needs to use the stack
// of this dev up (a shell script of export lines: DATABASE_URL, PATH with
// this binary's directory first, METALLOC_API_LISTEN when the API is not on
// the default address, so that metalloc-manage's API clients find it), and
// the stack's URLs as comments. Mode 0600: the URL may hold a password.
func writeDevEnv(path string, s *devstack.Stack, url string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s%d; removed when it stops. Use: eval \"$(%s dev env)\"\n", devEnvPID, os.Getpid(), manageCommand())
	fmt.Fprintf(&b, "# api: %s\n# placement: %s\n", s.APIURL, placementURL(s))
	for _, c := range s.Conductors {
		fmt.Fprintf(&b, "# conductor %s metrics: %s\n", c.Name, c.MetricsURL)
	}
	fmt.Fprintf(&b, "export DATABASE_URL=%s\n", shellQuote(url))
	fmt.Fprintf(&b, "export PATH=%s:\"$PATH\"\n", shellQuote(filepath.Dir(exe)))
	if listen := strings.TrimPrefix(s.APIURL, "http://"); listen != config.DefaultAPIListen {
		fmt.Fprintf(&b, "export METALLOC_API_LISTEN=%s\n", shellQuote(listen))
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b.Bytes(), 0o600); err != nil {
		return fmt.Errorf("writing the dev environment: %w", err)
	}
	return os.Rename(tmp, path)
}

// devEnvCmd is `metalloc-manage dev env`: print the environment of the
// running dev up, for eval in another shell.
func devEnvCmd() *cobra.Command {
	var envFile string
	c := &cobra.Command{
		Use:   "env",
		Short: "print the environment (DATABASE_URL, PATH) of the running dev up, for eval \"$(metalloc-manage dev env)\"",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if envFile == "" {
				var err error
				if envFile, err = defaultEnvFile(); err != nil {
					return err
				}
			}
			data, err := os.ReadFile(envFile)
			if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("no dev stack is running (no %s): start one with make run or metalloc-manage dev up", envFile)
			}
			if err != nil {
				return err
			}
			first, _, _ := bufio.NewReader(bytes.NewReader(data)).ReadLine()
			pidText, _, _ := strings.Cut(strings.TrimPrefix(string(first), devEnvPID), ";")
			pid, err := strconv.Atoi(pidText)
			if err != nil || !strings.HasPrefix(string(first), devEnvPID) {
				return fmt.Errorf("%s was not written by dev up", envFile)
			}
			if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
				return fmt.Errorf("the dev stack of %s (pid %d) is gone: start one with make run or metalloc-manage dev up", envFile, pid)
			}
			_, err = cmd.OutOrStdout().Write(data)
			return err
		},
	}
	c.Flags().StringVar(&envFile, "env-file", "", "the file dev up wrote (default dev.env next to this binary)")
	return c
}

// manageCommand is how to call this binary from the current directory:
// bin/metalloc-manage in a checkout after make build, else its full path.
func manageCommand() string {
	exe, err := os.Executable()
	if err != nil {
		return "metalloc-manage"
	}
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, exe); err == nil && !strings.HasPrefix(rel, "..") {
			return rel
		}
	}
	return exe
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
