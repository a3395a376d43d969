package topology

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestParseLevels(t *testing.T) {
	got, err := ParseLevels([]string{"row=extra.row", " rack = trait:CUSTOM_RACK_", "agg=aggregate", "u=properties.slot.u"})
	want := []Level{{"row", "extra.row"}, {"rack", "trait:CUSTOM_RACK_"}, {"agg", "aggregate"}, {"u", "properties.slot.u"}}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("ParseLevels = %v, %v", got, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"rack"}, `invalid topology level "rack": want NAME=SOURCE, e.g. rack=extra.rack`},
		{[]string{"rack=extra."}, `invalid source "extra." of topology level rack: extra.KEY needs a key`},
		{[]string{"rack=properties."}, `properties.KEY needs a key`},
		{[]string{"rack=trait:"}, `trait:PREFIX needs a prefix of capital letters, digits and _`},
		{[]string{"rack=trait:A B"}, `trait:PREFIX needs a prefix of capital letters, digits and _`},
		{[]string{"rack=rack"}, `invalid source "rack" of topology level rack: want extra.KEY, properties.KEY, trait:PREFIX or aggregate`},
		{[]string{"1rack=extra.rack"}, `invalid topology level name "1rack": a letter followed by up to 62 letters, digits, '_' or '-'`},
		{[]string{"=extra.rack"}, `invalid topology level name ""`},
		{[]string{"rack=extra.a", "rack=extra.b"}, `topology level rack is given twice`},
		{strings.Fields("a=aggregate b=aggregate c=aggregate d=aggregate e=aggregate f=aggregate g=aggregate h=aggregate i=aggregate"),
			`too many topology levels: 9, at most 8`},
	} {
		_, err := ParseLevels(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseLevels(%q) = %v, want %q", tc.args, err, tc.want)
		}
	}
}

func TestLevelIndex(t *testing.T) {
	if i, err := LevelIndex(rowRack, "rack"); i != 1 || err != nil {
		t.Fatalf("LevelIndex = %d, %v", i, err)
	}
	if _, err := LevelIndex(rowRack, "block"); err == nil || err.Error() != `unknown topology level "block": the levels are row, rack` {
		t.Fatalf("LevelIndex(block) = %v", err)
	}
	if _, err := LevelIndex(nil, "rack"); err == nil || !strings.Contains(err.Error(), "no topology is configured") {
		t.Fatalf("LevelIndex(nil) = %v", err)
	}
	if r, err := ParseRule(""); r != None || err != nil {
		t.Fatalf("ParseRule(\"\") = %v, %v", r, err)
	}
	if _, err := ParseRule("strict"); err == nil {
		t.Fatal("ParseRule(strict) succeeded")
	}
}

// ParseRule reads a rule ("" is None).
func ParseRule(s string) (Rule, error) {
	switch r := Rule(s); r {
	case "":
		return None, nil
	case None, Required, Preferred:
		return r, nil
	}
	return "", fmt.Errorf("invalid placement rule %q: want none, required or preferred", s)
}
