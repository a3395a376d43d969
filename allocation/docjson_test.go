package allocation

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/metalloc/metalloc/web"
)

// docJSON is what c.JSON writes for v's document: encoding/json, HTML
// escaping off (web.JSONSerializer), without the newline.
func docJSON(t testing.TB, v View, base string, ver web.Version) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	require.NoError(t, enc.Encode(v.Doc(base, ver)))
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// TestAppendDocIsEncodingJSON: AppendDoc writes what encoding/json writes
// for Doc's map, byte for byte: every field set or unset, both sides of the
// owner microversion, strings that need escaping, extra as stored.
func TestAppendDocIsEncodingJSON(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 6, 1, 2, 345678000, time.UTC)
	whole := now.Truncate(time.Second)
	node, group := uuid.New(), uuid.New()
	s := func(x string) *string { return &x }
	views := []View{
		{Allocation: Allocation{Uuid: uuid.New(), State: StateAllocating, ResourceClass: "gold", CreatedAt: now}},
		{Allocation: Allocation{Uuid: uuid.New(), Name: s("a-1"), State: StateActive, ResourceClass: "gold",
			CandidateNodes: []uuid.UUID{node, uuid.New()}, Extra: json.RawMessage(`{ "a": [1, 2], "b": {"c": "d"} }`),
			Owner: s("proj"), CreatedAt: whole, UpdatedAt: &now}, NodeUUID: &node, Traits: []string{"CUSTOM_A", "CUSTOM_B"},
			GroupUUID: &group},
		{Allocation: Allocation{Uuid: uuid.New(), State: StateError, ResourceClass: "<&>\u2028\u2029\x00\x1f\t\n\r\b\f\"\\é😀",
			LastError: s("no node: \"x\" <y> \x7f \xff\xfe end"), CreatedAt: now, UpdatedAt: &whole}, NodeUUID: &node},
		{Allocation: Allocation{Uuid: uuid.New(), State: StateAllocating, ResourceClass: "gold", CreatedAt: now,
			Extra: json.RawMessage(`{}`)}, NodeUUID: &node}, // allocating: no node shown
	}
	for i, v := range views {
		for _, ver := range []web.Version{{Major: 1, Minor: 52}, {Major: 1, Minor: 60}, {Major: 1, Minor: 81}} {
			for _, base := range []string{"http://127.0.0.1:6385", "https://bm.example.com:443/x\"y"} {
				got, err := v.AppendDoc(nil, base, ver)
				require.NoError(t, err)
				require.Equal(t, string(docJSON(t, v, base, ver)), string(got), "view %d at %v", i, ver)
			}
		}
	}
	_, err := View{Allocation: Allocation{Extra: json.RawMessage(`{"a":`)}}.AppendDoc(nil, "", web.Version{Major: 1, Minor: 1})
	require.Error(t, err, "invalid extra")
}

// FuzzAppendDocStrings: any name, last_error, resource class, owner and
// trait is escaped as encoding/json escapes it.
func FuzzAppendDocStrings(f *testing.F) {
	f.Add("a-1", "boom", "gold", "proj", "CUSTOM_X")
	f.Add("\u2028", "\x00\xff", "<>&", "\"\\", "\t\n")
	f.Fuzz(func(t *testing.T, name, lastError, rc, owner, trait string) {
		v := View{Allocation: Allocation{Uuid: uuid.New(), Name: &name, LastError: &lastError, State: StateError,
			ResourceClass: rc, Owner: &owner, CreatedAt: time.Unix(1764201600, 0)}, Traits: []string{trait}}
		ver := web.Version{Major: 1, Minor: 81}
		got, err := v.AppendDoc(nil, "http://h", ver)
		require.NoError(t, err)
		require.Equal(t, string(docJSON(t, v, "http://h", ver)), string(got))
	})
}

// BenchmarkAppendDoc: an active allocation's document, AppendDoc against
// encoding/json of Doc's map (what answered before).
func BenchmarkAppendDoc(b *testing.B) {
	node := uuid.New()
	now := time.Now()
	v := View{Allocation: Allocation{Uuid: uuid.New(), State: StateActive, ResourceClass: "bench-1",
		CreatedAt: now, UpdatedAt: &now}, NodeUUID: &node, Traits: []string{"CUSTOM_NVME"}}
	ver := web.Version{Major: 1, Minor: 81}
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 1024)
		for b.Loop() {
			buf, _ = v.AppendDoc(buf[:0], "http://127.0.0.1:6385", ver)
		}
	})
	b.Run("map", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			docJSON(b, v, "http://127.0.0.1:6385", ver)
		}
	})
}
