package topology

import (
	"fmt"
	"strings"
	"testing"

	"github.com/metalloc/metalloc/db/dbtest"
)

func TestTree(t *testing.T) {
	pool := dbtest.New(t)
	ctx := t.Context()
	if err := Save(ctx, pool, rowRack); err != nil {
		t.Fatal(err)
	}
	add := func(rc, extra string, free bool, traits ...string) {
		state := "available"
		if !free {
			state = "active"
		}
		id, _ := dbtest.Node(t, pool, dbtest.NodeSpec{ResourceClass: rc, ProvisionState: state, Traits: traits})
		setExtra(t, pool, id, extra)
	}
	add("gpu", `{"row": 1, "rack": 10}`, true, "CUSTOM_A")
	add("gpu", `{"row": 1, "rack": 10}`, false)
	add("gpu", `{"row": 1, "rack": 2}`, true, "CUSTOM_A")
	add("gpu", `{"row": 1}`, true)
	add("gpu", `{"row": 2, "rack": 1}`, false)
	add("gpu", `{}`, true)
	add("cpu", `{"row": 3, "rack": 1}`, true)

	levels, root, err := Tree(ctx, pool, TreeFilter{ResourceClass: "gpu"})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := WriteTree(&b, levels, root, TreeFilter{ResourceClass: "gpu"}); err != nil {
		t.Fatal(err)
	}
	want := `topology: row=extra.row rack=extra.rack
nodes of gpu: free (available to allocate) / total
DOMAIN          FREE  TOTAL
all                4      6
  row 1            3      4
    rack 1/2       1      1
    rack 1/10      1      2
    (no rack)      1      1
  row 2            0      1
    rack 2/1       0      1
  (no row)         1      1
`
	if b.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", b.String(), want)
	}

	_, root, err = Tree(ctx, pool, TreeFilter{Traits: []string{"CUSTOM_A"}})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprintf("%d/%d %d", root.Free, root.Total, len(root.Children)); got != "2/2 1" {
		t.Fatalf("with CUSTOM_A: %s", got)
	}
	_, root, _ = Tree(ctx, pool, TreeFilter{})
	if root.Total != 7 || len(root.Children) != 4 {
		t.Fatalf("all classes: total %d, %d rows", root.Total, len(root.Children))
	}
}
