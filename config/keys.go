package config

import (
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Binary is a metalloc command that reads configuration keys; it takes a
// --section.key flag for each key it reads.
type Binary string

// The four binaries.
const (
	BinaryAPI       Binary = "metalloc-api"
	BinaryConductor Binary = "metalloc-conductor"
	BinaryPlacement Binary = "metalloc-placement"
	BinaryManage    Binary = "metalloc-manage"
)

// Binaries lists every binary, in the order the documentation names them.
var Binaries = []Binary{BinaryAPI, BinaryConductor, BinaryPlacement, BinaryManage}

// Key is the one definition of a configuration key: its name, default,
// unit, description, the binaries that read it and, derived from the field
// of Config it fills, its type. Viper's defaults and environment binding,
// the --section.key flags, the strict loader, `metalloc-manage config`,
// configs/metalloc.yaml and docs/configuration.md's table all come from the keys
// (Keys).
type Key struct {
	// Name is "section.key", as nested in the YAML file.
	Name string
	// Default is the value used when nothing sets the key, of the field's
	// Go type (string, int, int32, int64, bool, float64, time.Duration);
	// nil for keys that have none (optional ratios, maps).
	Default any
	// DefaultText describes a default that is not a fixed value
	// ("$DATABASE_URL", "the host name"); "" shows Default.
	DefaultText string
	// DefaultEnv, when set, is an environment variable (not METALLOC_...)
	// whose value is the default (database.url: DATABASE_URL).
	DefaultEnv string
	// Unit is the unit of a number ("bytes", "connections"); durations
	// are written with theirs ("500ms", "10s").
	Unit string
	// Doc describes the key, for the sample file and docs/configuration.md.
	Doc string
	// Values, for an enumeration, are the accepted values.
	Values []string
	// Secret keys are masked by `metalloc-manage config show`.
	Secret bool
	// Example is shown in the sample configuration instead of the default
	// (commented out there when Default is nil).
	Example string
	// Readers are the binaries that read the key.
	Readers []Binary

	field []int        // index path of the field in Config
	typ   reflect.Type // the field's type
}

// Env is the environment variable that sets the key:
// METALLOC_<SECTION>_<KEY>, upper case (api.max_wait: METALLOC_API_MAX_WAIT).
func (k *Key) Env() string {
	return "METALLOC_" + strings.ToUpper(strings.ReplaceAll(k.Name, ".", "_"))
}

// Flag is the key's command-line flag without dashes: the key itself.
func (k *Key) Flag() string { return k.Name }

// IsMap reports a key whose value is a map with free-form sub-keys
// (placement_backend.allocation_ratios: resource class to ratio).
func (k *Key) IsMap() bool { return k.typ.Kind() == reflect.Map }

// ReadBy reports whether binary b reads the key.
func (k *Key) ReadBy(b Binary) bool { return slices.Contains(k.Readers, b) }

// SectionDoc is the introduction of a section in the sample configuration.
type SectionDoc struct {
	Name string
	Doc  string
}

var (
	keysOnce sync.Once
	keys     []*Key
	keyIndex map[string]*Key
)

// Keys returns every configuration key, in the order of the sample file
// (by section, then as documented). The result is shared: do not modify.
func Keys() []*Key {
	keysOnce.Do(func() {
		keys = registry()
		fields := configFields()
		keyIndex = make(map[string]*Key, len(keys))
		for _, k := range keys {
			f, ok := fields[k.Name]
			if !ok {
				panic(fmt.Sprintf("config: key %s has no field in Config", k.Name))
			}
			k.field, k.typ = f.index, f.typ
			if _, dup := keyIndex[k.Name]; dup {
				panic("config: key " + k.Name + " defined twice")
			}
			keyIndex[k.Name] = k
		}
		for name := range fields {
			if keyIndex[name] == nil {
				panic("config: field for " + name + " has no key definition")
			}
		}
	})
	return keys
}

// KeyNames returns every key's name, sorted.
func KeyNames() []string {
	var names []string
	for _, k := range Keys() {
		names = append(names, k.Name)
	}
	sort.Strings(names)
	return names
}

// Lookup returns the key named name ("api.max_wait"), or nil.
func Lookup(name string) *Key {
	Keys()
	return keyIndex[strings.ToLower(name)]
}

type fieldInfo struct {
	index []int
	typ   reflect.Type
}

// configFields maps every key name to its field in Config, following the
// mapstructure tags (",squash" embeds a struct's keys in its parent's
// section).
func configFields() map[string]fieldInfo {
	out := map[string]fieldInfo{}
	var walk func(t reflect.Type, prefix string, index []int)
	walk = func(t reflect.Type, prefix string, index []int) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("mapstructure")
			name, opts, _ := strings.Cut(tag, ",")
			idx := append(slices.Clone(index), i)
			switch {
			case opts == "squash":
				walk(f.Type, prefix, idx)
			case f.Type.Kind() == reflect.Struct && f.Type != reflect.TypeFor[time.Duration]():
				walk(f.Type, name+".", idx)
			default:
				out[prefix+name] = fieldInfo{idx, f.Type}
			}
		}
	}
	walk(reflect.TypeFor[Config](), "", nil)
	return out
}

// Defaults returns the configuration every key's default gives (nothing
// read from a file, the environment or flags; database.url empty). It is
// what each component's WithDefaults fills unset fields from.
func Defaults() Config {
	var c Config
	v := reflect.ValueOf(&c).Elem()
	for _, k := range Keys() {
		if k.Default != nil {
			v.FieldByIndex(k.field).Set(reflect.ValueOf(k.Default).Convert(k.typ))
		}
	}
	return c
}
