// Package freeport hands out TCP ports on 127.0.0.1 for the servers tests
// and the dev stack start (metalloc's processes, PostgreSQL, Keystone,
// Placement, Ironic).
//
// A port asked of the kernel with 127.0.0.1:0 comes from its ephemeral
// range (net.ipv4.ip_local_port_range), the range every outgoing
// connection's local port comes from too. Between the moment such a port
// is closed again and the moment the server it was picked for binds it,
// any connection to a loopback server (a test's PostgreSQL, say) can take
// it, and the server fails with "address already in use". Pick therefore
// chooses ports below the ephemeral range, which no outgoing connection
// uses, and never hands out the same port twice in one process.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Bounds of the range Pick chooses from when the ephemeral range starts
// high enough (Linux's default starts at 32768).
const (
	lowest  = 20000
	minSpan = 1000
)

var (
	mu     sync.Mutex
	handed = map[int]bool{}
)

// Pick returns a TCP port free on 127.0.0.1 at the moment of the call: one
// of [20000, start of the ephemeral range), chosen at random among those
// this process has not handed out before and that accept a listener. When
// the ephemeral range starts below 21000 (or cannot be read), it falls
// back to a port the kernel picks. Errors only when no port can be bound.
func Pick() (int, error) {
	hi := ephemeralStart()
	if hi-lowest < minSpan {
		return kernelPort()
	}
	mu.Lock()
	defer mu.Unlock()
	span := hi - lowest
	start := rand.IntN(span)
	for i := range span {
		port := lowest + (start+i)%span
		if handed[port] {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		l.Close()
		handed[port] = true
		return port, nil
	}
	return kernelPort()
}

// ephemeralStart is the first port of the kernel's ephemeral range, or 0
// when it cannot be read.
func ephemeralStart() int {
	raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(raw))
	if len(fields) != 2 {
		return 0
	}
	n, err := strconv.Atoi(fields[0])
	if err != nil {
		return 0
	}
	return n
}

func kernelPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("picking a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
