package node

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/stretchr/testify/require"
)

// TestApplyPatchMatchesRFC6902 applies random sequences of add, replace and
// remove operations (valid and invalid paths, objects and lists, nested
// values) with applyPatch, and one operation at a time with
// evanphx/json-patch (what applyPatch used before it worked on the decoded
// document): both must accept the same operations, refuse the same first
// one, and produce the same document.
func TestApplyPatchMatchesRFC6902(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(26, 1))
	keys := []string{"a", "b", "c", "0", "1", "-"}
	randPath := func() string {
		p := "/extra"
		for range 1 + rng.IntN(2) {
			p += "/" + keys[rng.IntN(len(keys))]
		}
		return p
	}
	randValue := func() any {
		switch rng.IntN(4) {
		case 0:
			return float64(rng.IntN(10))
		case 1:
			return map[string]any{"a": []any{1.0, "x"}}
		case 2:
			return []any{map[string]any{"b": nil}, 2.0}
		}
		return "s"
	}
	validRounds := 0
	for round := range 5000 {
		doc := map[string]any{"extra": map[string]any{"a": []any{1.0, map[string]any{"c": 2.0}}, "b": map[string]any{"0": "x"}}, "name": "n"}
		var ops []patchOp
		for range 1 + rng.IntN(4) {
			op := patchOp{Op: []string{"add", "replace", "remove"}[rng.IntN(3)], Path: randPath()}
			op.raw = map[string]any{"op": op.Op, "path": op.Path}
			if op.Op != "remove" {
				op.Value = randValue()
				op.raw["value"] = op.Value
			}
			ops = append(ops, op)
		}
		got, gotErr := applyPatch(context.Background(), doc, ops)

		// The reference: evanphx, one operation at a time, after the
		// same python-jsonpatch path check.
		cur, err := json.Marshal(doc)
		require.NoError(t, err)
		var wantErr error
		for _, op := range ops {
			var current any
			require.NoError(t, json.Unmarshal(cur, &current))
			if reason := pointerProblem(current, op); reason != "" {
				wantErr = fmt.Errorf("%s", reason)
				break
			}
			one, err := json.Marshal([]map[string]any{op.raw})
			require.NoError(t, err)
			p, err := jsonpatch.DecodePatch(one)
			require.NoError(t, err)
			if cur, err = p.Apply(cur); err != nil {
				wantErr = err
				break
			}
		}
		what := fmt.Sprintf("round %d: %v", round, ops)
		if wantErr != nil {
			require.Error(t, gotErr, what)
			continue
		}
		validRounds++
		require.NoError(t, gotErr, what)
		var want map[string]any
		require.NoError(t, json.Unmarshal(cur, &want))
		require.Equal(t, want, got, what)
		// doc itself is untouched.
		require.Equal(t, "n", doc["name"])
		require.Equal(t, map[string]any{"0": "x"}, doc["extra"].(map[string]any)["b"], what)
	}
	t.Logf("%d of 5000 patches applied", validRounds)
	require.Greater(t, validRounds, 500, "too few valid patches to compare")
}

// TestApplyPatchStopsWhenContextEnds: a patch whose request has ended (its
// deadline passed, the client left) stops instead of running on while its
// caller holds the node's row lock; the caller's transaction then rolls
// back and releases it.
func TestApplyPatchStopsWhenContextEnds(t *testing.T) {
	t.Parallel()
	ops := make([]patchOp, 3*checkPatchCtxEvery)
	for i := range ops {
		p := "/extra/k" + strconv.Itoa(i)
		ops[i] = patchOp{Op: "add", Path: p, Value: 1.0, raw: map[string]any{"op": "add", "path": p, "value": 1.0}}
	}
	doc := map[string]any{"extra": map[string]any{}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := applyPatch(ctx, doc, ops)
	require.ErrorIs(t, err, context.Canceled)

	out, err := applyPatch(context.Background(), doc, ops)
	require.NoError(t, err)
	require.Len(t, out["extra"], len(ops))
	require.Empty(t, doc["extra"], "the document given is not changed")
}

// BenchmarkApplyPatch is the CPU cost of one node PATCH's operations by
// their number (each adds a key to extra, as the probe of issue 26 did):
// linear since the document is no longer re-encoded per operation (go
// test -bench ApplyPatch ./node; figures in the closing note of issue 26).
func BenchmarkApplyPatch(b *testing.B) {
	for _, n := range []int{325, 650, 1300, 2600} {
		b.Run("ops="+strconv.Itoa(n), func(b *testing.B) {
			ops := make([]patchOp, n)
			for i := range ops {
				p := "/extra/" + strconv.Itoa(i)
				ops[i] = patchOp{Op: "add", Path: p, Value: 0.0, raw: map[string]any{"op": "add", "path": p, "value": 0.0}}
			}
			name, rc := "node-1", "gold"
			node := Node{Name: &name, Driver: "fake-hardware", ResourceClass: &rc, ProvisionState: StateAvailable,
				Properties: map[string]any{"cpus": 8.0}, Extra: map[string]any{"a": "b"}}
			for b.Loop() {
				if _, err := applyPatch(context.Background(), patchDocument(&node), ops); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
