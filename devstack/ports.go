package devstack

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ErrPortBusy is wrapped by Start's error when an address the stack should
// listen on is taken by another process.
var ErrPortBusy = errors.New("port busy")

// checkFree fails with ErrPortBusy, naming addr and the process that
// listens there when it can be found, unless addr can be bound now.
func checkFree(what, addr string) error {
	l, err := net.Listen("tcp", addr)
	if err == nil {
		return l.Close()
	}
	return fmt.Errorf("devstack: %w: %s cannot listen on %s: %s%s (stop it, or choose another address)",
		ErrPortBusy, what, addr, err, holderOf(addr))
}

// holderOf describes the process listening on addr's port (", held by
// pid 123 (nginx)"), or "" when /proc does not say.
func holderOf(addr string) string {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return ""
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return ""
	}
	inodes := listeningInodes(port)
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range procs {
		if ownsSocket(dir, inodes) {
			comm, _ := os.ReadFile(filepath.Join(dir, "comm"))
			return fmt.Sprintf(", held by pid %s (%s)", filepath.Base(dir), strings.TrimSpace(string(comm)))
		}
	}
	return ""
}

// listensOn reports whether process pid holds a listening TCP socket on
// port (from /proc: its file descriptors and /proc/net/tcp{,6}).
func listensOn(pid, port int) bool {
	return ownsSocket(filepath.Join("/proc", strconv.Itoa(pid)), listeningInodes(port))
}

// listeningInodes returns the socket inodes listening on TCP port.
func listeningInodes(port int) map[string]bool {
	out := map[string]bool{}
	for inode, p := range listeners() {
		if p == port {
			out[inode] = true
		}
	}
	return out
}

// listeners maps the inode of every listening TCP socket (IPv4 and IPv6,
// from /proc/net/tcp{,6}) to its port.
func listeners() map[string]int {
	out := map[string]int{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			// sl local_address rem_address st ... uid timeout inode
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" { // 0A: LISTEN
				continue
			}
			i := strings.LastIndexByte(fields[1], ':')
			if i < 0 {
				continue
			}
			if p, err := strconv.ParseInt(fields[1][i+1:], 16, 32); err == nil {
				out[fields[9]] = int(p)
			}
		}
		fh.Close()
	}
	return out
}

// ListeningPorts returns the TCP ports process pid listens on, sorted
// (from /proc; none when its descriptors cannot be read): what a test
// checks `dev up`'s processes against the ports it was given.
func ListeningPorts(pid int) []int {
	ports := listeners()
	fds, _ := os.ReadDir(filepath.Join("/proc", strconv.Itoa(pid), "fd"))
	seen := map[int]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "fd", fd.Name()))
		if p, ok := ports[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")]; err == nil && ok && strings.HasPrefix(link, "socket:[") {
			seen[p] = true
		}
	}
	out := make([]int, 0, len(seen))
	for p := range seen {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// ownsSocket reports whether the process at /proc dir has one of inodes
// open.
func ownsSocket(dir string, inodes map[string]bool) bool {
	if len(inodes) == 0 {
		return false
	}
	fds, err := os.ReadDir(filepath.Join(dir, "fd"))
	if err != nil {
		return false
	}
	for _, fd := range fds {
		link, err := os.Readlink(filepath.Join(dir, "fd", fd.Name()))
		if err == nil && strings.HasPrefix(link, "socket:[") && inodes[strings.TrimSuffix(link[len("socket:["):], "]")] {
			return true
		}
	}
	return false
}

// CheckFree is Start's check of an address before anything starts, for
// callers that do slow work first (dev up starts PostgreSQL): ErrPortBusy
// naming addr and its holder, unless addr can be bound now.
func CheckFree(what, addr string) error { return checkFree(what, addr) }
