package placement

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
)

// jsonObject is a JSON object whose members keep their order, decoded
// into or encoded from values of T: Placement (Python dicts) keeps the
// order of a request's providers and classes, writes allocations in that
// order and lists them back in it, where a Go map would forget it.
// A repeated member keeps its first place and its last value, as a dict
// built from the members does.
type jsonObject[T any] struct {
	keys []string
	vals map[string]T
}

// set adds or replaces the member k.
func (o *jsonObject[T]) set(k string, v T) {
	if o.vals == nil {
		o.vals = map[string]T{}
	}
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}

// get is the member k (the zero T and false when absent).
func (o *jsonObject[T]) get(k string) (T, bool) {
	v, ok := o.vals[k]
	return v, ok
}

// UnmarshalJSON reads an object (null leaves o empty).
func (o *jsonObject[T]) UnmarshalJSON(b []byte) error {
	*o = jsonObject[T]{}
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		return nil
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return errors.New("not a JSON object")
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		k, _ := tok.(string)
		var v T
		if err := dec.Decode(&v); err != nil {
			return err
		}
		o.set(k, v)
	}
	_, err = dec.Token()
	return err
}

// MarshalJSON writes the members in order.
func (o jsonObject[T]) MarshalJSON() ([]byte, error) {
	b := []byte{'{'}
	for i, k := range o.keys {
		if i > 0 {
			b = append(b, ',')
		}
		kj, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		vj, err := json.Marshal(o.vals[k])
		if err != nil {
			return nil, err
		}
		b = append(append(append(b, kj...), ':'), vj...)
	}
	return append(b, '}'), nil
}

// pyFloat is a float written as Python's json module writes one
// (float.__repr__): "1.0", not Go's "1"; "1e+16" from 10^16 up and below
// 10^-4. Placement writes allocation_ratio so, and clients show it as
// they read it.
type pyFloat float64

// MarshalJSON writes f as Python does.
func (f pyFloat) MarshalJSON() ([]byte, error) {
	x := float64(f)
	if math.IsInf(x, 0) || math.IsNaN(x) {
		return nil, errors.New("not a JSON number")
	}
	if x != 0 && (math.Abs(x) < 1e-4 || math.Abs(x) >= 1e16) {
		return strconv.AppendFloat(nil, x, 'e', -1, 64), nil
	}
	s := strconv.FormatFloat(x, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return []byte(s), nil
}
