package web

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPreferWait(t *testing.T) {
	for _, c := range []struct {
		headers []string
		n       int
		ok      bool
	}{
		{nil, 0, false},
		{[]string{"wait=10"}, 10, true},
		{[]string{"respond-async, WAIT = 5"}, 5, true},
		{[]string{`wait="7"; x=y`}, 7, true},
		{[]string{"return=minimal", "wait=0"}, 0, true},
		{[]string{"wait=-1"}, 0, false},
		{[]string{"wait=soon"}, 0, false},
		{[]string{"waiting=3"}, 0, false},
	} {
		h := http.Header{}
		for _, v := range c.headers {
			h.Add("Prefer", v)
		}
		n, ok := PreferWait(h)
		require.Equal(t, c.ok, ok, c.headers)
		require.Equal(t, c.n, n, c.headers)
	}
}

func TestAcceptsEventStream(t *testing.T) {
	h := http.Header{}
	require.False(t, AcceptsEventStream(h))
	h.Set("Accept", "application/json")
	require.False(t, AcceptsEventStream(h))
	h.Set("Accept", "application/json, Text/Event-Stream;q=0.9")
	require.True(t, AcceptsEventStream(h))
}
