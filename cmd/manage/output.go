package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
)

// output is the formatting options every list and show command of
// metalloc-manage takes, named as OpenStackClient's (cliff's) are:
// -f/--format table (the default), json, yaml or value, and -c/--column
// (repeatable) to print only some columns or fields. Lists print one
// object per row keyed by the column headings in json and yaml, one line
// of space-separated values per row in value; shows print one object keyed
// by field name in json and yaml, a Field/Value table, one value per line
// in value.
type output struct {
	format  string
	columns []string
}

// outputFormats are the values -f accepts.
var outputFormats = []string{"table", "json", "yaml", "value"}

// addOutputFlags adds -f/--format and -c/--column to cmd.
func addOutputFlags(cmd *cobra.Command) *output {
	o := &output{}
	cmd.Flags().StringVarP(&o.format, "format", "f", "table", "output format: "+strings.Join(outputFormats, ", "))
	cmd.Flags().StringArrayVarP(&o.columns, "column", "c", nil, "print only this column (list: heading or field name; show: field name); repeatable")
	return o
}

// check refuses an unknown -f value (before anything is sent).
func (o *output) check() error {
	if !slices.Contains(outputFormats, o.format) {
		return fmt.Errorf("-f %q: want one of %s", o.format, strings.Join(outputFormats, ", "))
	}
	return nil
}

// column is one column of a list: its heading and how to read it from a
// document (the field of that name unless value is set).
type column struct {
	heading, field string
	value          func(doc map[string]any) any
}

func (c column) of(doc map[string]any) any {
	if c.value != nil {
		return c.value(doc)
	}
	return doc[c.field]
}

// selectColumns keeps the columns -c names (by heading, case-insensitive,
// or field name), in the order given; none named means all.
func (o *output) selectColumns(all []column) ([]column, error) {
	if len(o.columns) == 0 {
		return all, nil
	}
	var out []column
	for _, name := range o.columns {
		i := slices.IndexFunc(all, func(c column) bool { return strings.EqualFold(c.heading, name) || c.field == name })
		if i < 0 {
			names := make([]string, len(all))
			for k, c := range all {
				names[k] = c.heading
			}
			return nil, fmt.Errorf("-c %q: no such column (columns: %s)", name, strings.Join(names, ", "))
		}
		out = append(out, all[i])
	}
	return out, nil
}

// list prints docs as rows of cols.
func (o *output) list(w io.Writer, cols []column, docs []map[string]any) error {
	if err := o.check(); err != nil {
		return err
	}
	cols, err := o.selectColumns(cols)
	if err != nil {
		return err
	}
	headings := make([]string, len(cols))
	for i, c := range cols {
		headings[i] = c.heading
	}
	switch o.format {
	case "json", "yaml":
		rows := make([]ordered, len(docs))
		for i, d := range docs {
			rows[i].keys = headings
			for _, c := range cols {
				rows[i].values = append(rows[i].values, c.of(d))
			}
		}
		return encode(w, o.format, rows)
	case "value":
		for _, d := range docs {
			cells := make([]string, len(cols))
			for i, c := range cols {
				cells[i] = cell(c.of(d))
			}
			fmt.Fprintln(w, strings.Join(cells, " "))
		}
		return nil
	}
	rows := make([][]string, len(docs))
	for i, d := range docs {
		for _, c := range cols {
			rows[i] = append(rows[i], cell(c.of(d)))
		}
	}
	printTable(w, headings, rows)
	return nil
}

// show prints one document: its fields in order first, then the rest of
// its keys sorted (links left out).
func (o *output) show(w io.Writer, doc map[string]any, order ...string) error {
	if err := o.check(); err != nil {
		return err
	}
	fields := slices.Clone(order)
	var rest []string
	for k := range doc {
		if k != "links" && !slices.Contains(order, k) {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	fields = append(fields, rest...)
	if len(o.columns) > 0 {
		for _, c := range o.columns {
			if _, ok := doc[c]; !ok {
				return fmt.Errorf("-c %q: no such field (fields: %s)", c, strings.Join(fields, ", "))
			}
		}
		fields = o.columns
	}
	var obj ordered
	for _, f := range fields {
		if v, ok := doc[f]; ok {
			obj.keys, obj.values = append(obj.keys, f), append(obj.values, v)
		}
	}
	switch o.format {
	case "json", "yaml":
		return encode(w, o.format, obj)
	case "value":
		for _, v := range obj.values {
			fmt.Fprintln(w, cell(v))
		}
		return nil
	}
	rows := make([][]string, len(obj.keys))
	for i, k := range obj.keys {
		rows[i] = []string{k, cell(obj.values[i])}
	}
	printTable(w, []string{"Field", "Value"}, rows)
	return nil
}

// encode writes v as indented JSON or as YAML.
func encode(w io.Writer, format string, v any) error {
	if format == "yaml" {
		enc := yaml.NewEncoder(w)
		enc.SetIndent(2)
		if err := enc.Encode(v); err != nil {
			return err
		}
		return enc.Close()
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// cell is v as a table or value cell: null as None and booleans as True
// and False (as OpenStackClient prints them), whole numbers without a
// fraction, lists of scalars comma-separated, objects as compact JSON, new
// lines as spaces.
func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case string:
		return strings.ReplaceAll(x, "\n", " ")
	case bool:
		if x {
			return "True"
		}
		return "False"
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case int:
		return strconv.Itoa(x)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			if _, nested := e.(map[string]any); nested {
				raw, _ := json.Marshal(x)
				return string(raw)
			}
			parts[i] = cell(e)
		}
		return strings.Join(parts, ", ")
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(raw)
}

// ordered is an object whose keys keep their order in JSON and YAML.
type ordered struct {
	keys   []string
	values []any
}

// MarshalJSON writes the keys in order.
func (o ordered) MarshalJSON() ([]byte, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kr, _ := json.Marshal(k)
		vr, err := json.Marshal(o.values[i])
		if err != nil {
			return nil, err
		}
		b.Write(kr)
		b.WriteByte(':')
		b.Write(vr)
	}
	b.WriteByte('}')
	return []byte(b.String()), nil
}

// MarshalYAML gives a mapping node with the keys in order.
func (o ordered) MarshalYAML() (any, error) {
	n := &yaml.Node{Kind: yaml.MappingNode}
	for i, k := range o.keys {
		var v yaml.Node
		if err := v.Encode(o.values[i]); err != nil {
			return nil, err
		}
		n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: k}, &v)
	}
	return n, nil
}
