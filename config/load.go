package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/agnivade/levenshtein"
	"github.com/go-viper/mapstructure/v2"
	"github.com/robfig/cron/v3"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"
)

// Source says where a key's effective value came from.
type Source string

// The sources of a value, by precedence (a flag wins over everything).
const (
	SourceFlag    Source = "flag"
	SourceEnv     Source = "env"
	SourceFile    Source = "file"
	SourceDefault Source = "default"
)

// Value is one key's effective value and where it came from.
type Value struct {
	Key *Key
	// Value is the field's value in Config (a nil pointer or map when
	// unset).
	Value  any
	Source Source
	// Origin names the source: the file's path, the environment variable
	// or the flag ("--api.max_wait"); "" for a default.
	Origin string
}

// Effective is a loaded configuration with every key's source.
type Effective struct {
	Config Config
	// Values has one entry per key, in Keys order.
	Values []Value
}

// Problems lists everything wrong with a configuration, one message per
// problem, each naming the key (and, for a misspelt one, the nearest valid
// key). Load returns all of them at once.
type Problems []string

func (p Problems) Error() string {
	if len(p) == 1 {
		return "configuration: " + p[0]
	}
	return fmt.Sprintf("configuration: %d problems:\n  %s", len(p), strings.Join(p, "\n  "))
}

// envPrefix starts every configuration environment variable.
const envPrefix = "METALLOC_"

// otherEnv are METALLOC_ environment variables that are not configuration
// keys and that the loader therefore accepts: the credentials of
// `metalloc-manage allocation` and the knobs of tests and benchmarks.
// Anything else starting with METALLOC_ must be a key's variable
// (TestEveryMetallocVariableIsKnown checks the repository).
var otherEnv = []string{"METALLOC_API_USERNAME", "METALLOC_API_PASSWORD", "METALLOC_ARTIFACTS",
	"METALLOC_PLACEMENT_CONFORMANCE_DIR",
	"METALLOC_DEB_VERSION", // the package version scripts/deb.sh gives nfpm
}

// otherEnvPrefixes are prefixes of further non-configuration variables
// (tests, benchmarks, fuzzing).
var otherEnvPrefixes = []string{"METALLOC_BENCH_", "METALLOC_FUZZ_", "METALLOC_TEST_"}

// KnownOtherEnv reports whether name is a METALLOC_ variable that is not
// configuration but known (tests, benchmarks, metalloc-manage
// allocation's credentials), which the loader accepts.
func KnownOtherEnv(name string) bool {
	return slices.Contains(otherEnv, name) ||
		slices.ContainsFunc(otherEnvPrefixes, func(pre string) bool { return strings.HasPrefix(name, pre) })
}

// Load reads the configuration: the YAML file at path ("" reads none), then
// METALLOC_<SECTION>_<KEY> environment variables, then the flags of fs that
// are set and named after keys (--api.listen); precedence flag, environment,
// file, default. An unknown key in the file, an unknown METALLOC_ variable,
// a value of the wrong type or outside a key's values makes it return
// Problems, listing each.
func Load(path string, fs *pflag.FlagSet) (Config, error) {
	e, err := Resolve(path, fs)
	if e == nil {
		return Config{}, err
	}
	return e.Config, err
}

// Resolve is Load, returning each key's value with its source. On problems
// it returns both the configuration (as far as it could be read) and
// Problems; on an unreadable file, nil and the error.
func Resolve(path string, fs *pflag.FlagSet) (*Effective, error) {
	var problems Problems
	v := viper.New()
	for _, k := range Keys() {
		if k.Default != nil {
			v.SetDefault(k.Name, k.Default)
		}
		if err := v.BindEnv(k.Name, k.Env()); err != nil {
			return nil, err
		}
	}
	file := viper.New()
	var settings map[string]any
	if path != "" {
		file.SetConfigFile(path)
		if ext := strings.TrimPrefix(filepath.Ext(path), "."); !slices.Contains(viper.SupportedExts, ext) {
			file.SetConfigType("yaml")
		}
		if err := file.ReadInConfig(); err != nil {
			return nil, fmt.Errorf("reading config %s: %w", path, err)
		}
		fileProblems, bad := checkFile(path, fileTree(path, file))
		problems = append(problems, fileProblems...)
		// A section given a value or a key given a section is reported;
		// the rest of the file still applies.
		settings = file.AllSettings()
		for name := range bad {
			section, key, nested := strings.Cut(name, ".")
			if m, ok := settings[section].(map[string]any); ok && nested {
				delete(m, key)
			} else {
				delete(settings, section)
			}
		}
		if err := v.MergeConfigMap(settings); err != nil {
			return nil, fmt.Errorf("reading config %s: %w", path, err)
		}
	}
	flags := map[string]*pflag.Flag{}
	if fs != nil {
		fs.VisitAll(func(f *pflag.Flag) {
			if k := Lookup(f.Name); k != nil && f.Changed {
				flags[k.Name] = f
			}
		})
	}
	if fs != nil {
		fs.Visit(func(f *pflag.Flag) {
			if msg := removedKey(f.Name); msg != "" {
				problems = append(problems, msg+" (flag --"+f.Name+")")
			}
		})
	}
	for name, f := range flags {
		if err := v.BindPFlag(name, f); err != nil {
			return nil, err
		}
	}
	problems = append(problems, checkEnv(os.Environ())...)

	e := &Effective{}
	cv := reflect.ValueOf(&e.Config).Elem()
	for _, k := range Keys() {
		val := Value{Key: k, Source: SourceDefault}
		switch {
		case flags[k.Name] != nil:
			val.Source, val.Origin = SourceFlag, "--"+k.Name
		case os.Getenv(k.Env()) != "":
			val.Source, val.Origin = SourceEnv, k.Env()
		case inFile(settings, k.Name):
			val.Source, val.Origin = SourceFile, path
		}
		raw := v.Get(k.Name)
		if val.Source == SourceDefault && k.DefaultEnv != "" && os.Getenv(k.DefaultEnv) != "" {
			raw = os.Getenv(k.DefaultEnv)
			val.Source, val.Origin = SourceEnv, k.DefaultEnv
		}
		field := cv.FieldByIndex(k.field)
		if raw != nil {
			if err := decodeInto(raw, field); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v%s", k.Name, err, val.from()))
			}
		}
		val.Value = field.Interface()
		if len(k.Values) > 0 && !slices.Contains(k.Values, field.String()) {
			problems = append(problems, fmt.Sprintf("%s: %q is not one of %s%s", k.Name, field.String(),
				strings.Join(k.Values, ", "), val.from()))
		}
		e.Values = append(e.Values, val)
	}
	problems = append(problems, e.Config.check()...)
	if len(problems) > 0 {
		return e, problems
	}
	return e, nil
}

// from describes the value's source for a problem message.
func (v Value) from() string {
	switch v.Source {
	case SourceFlag:
		return " (flag " + v.Origin + ")"
	case SourceEnv:
		return " (environment variable " + v.Origin + ")"
	case SourceFile:
		return " (in " + v.Origin + ")"
	}
	return ""
}

// inFile reports whether the file's settings set key name.
func inFile(settings map[string]any, name string) bool {
	section, key, _ := strings.Cut(name, ".")
	m, _ := settings[section].(map[string]any)
	_, ok := m[key]
	return ok
}

// fileTree is the file's keys as nested maps, lower-cased as viper reads
// them, keeping keys without a value (an empty "conductr:" section), which
// viper's AllSettings drops.
func fileTree(path string, file *viper.Viper) map[string]any {
	var tree map[string]any
	if text, err := os.ReadFile(path); err == nil && yaml.Unmarshal(text, &tree) == nil {
		return lowerKeys(tree)
	}
	return file.AllSettings() // not YAML (TOML, ...)
}

func lowerKeys(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			v = lowerKeys(sub)
		}
		out[strings.ToLower(k)] = v
	}
	return out
}

// checkFile reports the keys of a file's settings (nested maps, keys
// lower-cased) that are no configuration key, each with the nearest valid
// key, and the keys given a section instead of a value (bad).
func checkFile(path string, settings map[string]any) (p Problems, bad map[string]bool) {
	bad = map[string]bool{}
	sectionNames := sortedKeys(settings)
	for _, section := range sectionNames {
		body := settings[section]
		known := slices.ContainsFunc(sections, func(s SectionDoc) bool { return s.Name == section })
		m, isMap := body.(map[string]any)
		switch {
		case known && !isMap && body != nil:
			p = append(p, fmt.Sprintf("%s: a section, not a value (in %s)", section, path))
			bad[section] = true
			continue
		case !known && !isMap && body != nil:
			p = append(p, unknown("key "+section, section, sectionList(), path))
			continue
		case !known && len(m) == 0:
			p = append(p, unknown("section "+section, section, sectionList(), path))
			continue
		}
		for _, name := range sortedKeys(m) {
			full := section + "." + name
			k := Lookup(full)
			if msg := removedKey(full); k == nil && msg != "" {
				p = append(p, msg+" (in "+path+")")
				continue
			}
			if k == nil {
				p = append(p, unknown("key "+full, full, KeyNames(), path))
				continue
			}
			if _, nested := m[name].(map[string]any); nested && !k.IsMap() {
				p = append(p, fmt.Sprintf("%s: a value, not a section (in %s)", full, path))
				bad[full] = true
			}
		}
	}
	return p, bad
}

// checkEnv reports METALLOC_ environment variables that set no key.
func checkEnv(environ []string) Problems {
	var p Problems
	envs := map[string]bool{}
	var names []string
	for _, k := range Keys() {
		envs[k.Env()] = true
		names = append(names, k.Env())
	}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) || envs[name] || KnownOtherEnv(name) {
			continue
		}
		if msg := removedKey(removedEnv(name)); msg != "" {
			p = append(p, msg+" (environment variable "+name+")")
			continue
		}
		msg := "unknown environment variable " + name
		if near := nearest(name, names); near != "" {
			msg += fmt.Sprintf("; did you mean %s (key %s)?", near, envKey(near))
		} else {
			msg += "; variables are METALLOC_<SECTION>_<KEY> for the keys of configs/metalloc.yaml"
		}
		p = append(p, msg)
	}
	sort.Strings(p)
	return p
}

// removedKeys are keys metalloc read once and no longer does, each with
// the readers it had and what replaces it. Setting one (file, environment
// or flag) is a problem that says so, instead of an unknown key or a
// setting silently ignored.
var removedKeys = map[string]struct {
	readers []Binary
	why     string
}{
	"ironic.max_attempts": {ironicReaders, "a node Ironic refuses is read again from Ironic at once and other nodes " +
		"are tried while any fits, for up to ironic.allocation_timeout"},
}

// removedKey is the problem of setting removed key name ("" when name is
// not a removed key).
func removedKey(name string) string {
	r, ok := removedKeys[name]
	if !ok {
		return ""
	}
	return fmt.Sprintf("%s was removed (%s): delete it", name, r.why)
}

// removedEnv is the removed key whose environment variable is env, or "".
func removedEnv(env string) string {
	for name := range removedKeys {
		if (&Key{Name: name}).Env() == env {
			return name
		}
	}
	return ""
}

// envKey is the key of a key's environment variable.
func envKey(env string) string {
	for _, k := range Keys() {
		if k.Env() == env {
			return k.Name
		}
	}
	return ""
}

// unknown is the message for an unknown name, with the nearest candidate.
func unknown(what, name string, candidates []string, path string) string {
	msg := "unknown " + what
	if near := nearest(name, candidates); near != "" {
		msg += "; did you mean " + near + "?"
	}
	return msg + " (in " + path + ")"
}

// nearest is the candidate closest to name by edit distance, if it is
// close enough to be a likely misspelling ("" otherwise).
func nearest(name string, candidates []string) string {
	best, dist := "", -1
	for _, c := range candidates {
		if d := levenshtein.ComputeDistance(strings.ToLower(name), strings.ToLower(c)); dist < 0 || d < dist {
			best, dist = c, d
		}
	}
	if dist < 0 || dist > max(3, len(name)/4) {
		return ""
	}
	return best
}

func sectionList() []string {
	var s []string
	for _, sec := range sections {
		s = append(s, sec.Name)
	}
	return s
}

func sortedKeys(m map[string]any) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// decodeInto converts raw (from viper: a YAML value, an environment or
// flag string, a default) into field, weakly typed as viper does: "30s" and
// "true" from the environment, durations as Go durations, maps from YAML or
// from "K=V,K=V", lists from YAML or from "A,B".
func decodeInto(raw any, field reflect.Value) error {
	target := field
	if field.Kind() == reflect.Pointer {
		target = reflect.New(field.Type().Elem()).Elem()
	}
	d, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		DecodeHook:       mapstructure.ComposeDecodeHookFunc(durationHook, mapHook, listHook),
		WeaklyTypedInput: true,
		Result:           target.Addr().Interface(),
	})
	if err != nil {
		return err
	}
	if err := d.Decode(raw); err != nil {
		return cleanDecodeError(err)
	}
	if field.Kind() == reflect.Pointer {
		field.Set(target.Addr())
	}
	return nil
}

// durationHook parses durations and refuses bare numbers, which would be
// nanoseconds ("max_wait: 60" is a mistake for 60s).
func durationHook(from, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeFor[time.Duration]() {
		return data, nil
	}
	switch d := data.(type) {
	case string:
		dur, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil {
			return nil, fmt.Errorf("%q is not a duration (write 500ms, 30s, 1h)", d)
		}
		return dur, nil
	case time.Duration:
		return d, nil
	case int, int64, float64, uint64:
		if reflect.ValueOf(d).IsZero() {
			return time.Duration(0), nil
		}
		return nil, fmt.Errorf("%v has no unit (write %vs or %vms)", d, d, d)
	}
	return data, nil
}

// mapHook reads a map key given as a string (environment, flag): YAML
// flow syntax ("{CUSTOM_A: 1.0}") or "CUSTOM_A=1.0,CUSTOM_B=2".
func mapHook(from, to reflect.Type, data any) (any, error) {
	s, ok := data.(string)
	if !ok || to.Kind() != reflect.Map {
		return data, nil
	}
	s = strings.TrimSpace(s)
	out := map[string]any{}
	if strings.HasPrefix(s, "{") {
		if err := yaml.Unmarshal([]byte(s), &out); err != nil {
			return nil, fmt.Errorf("%q is not a YAML map: %w", s, err)
		}
		return out, nil
	}
	for _, pair := range strings.Split(s, ",") {
		if strings.TrimSpace(pair) == "" {
			continue
		}
		k, val, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, fmt.Errorf("%q is not KEY=VALUE,KEY=VALUE", s)
		}
		out[strings.TrimSpace(k)] = strings.TrimSpace(val)
	}
	return out, nil
}

// cleanDecodeError drops mapstructure's framing ("decoding failed due to
// the following error(s): 'x' ...") from a one-value decode error.
func cleanDecodeError(err error) error {
	msg := err.Error()
	if i := strings.LastIndex(msg, "\n"); i >= 0 {
		msg = msg[i+1:]
	}
	msg = strings.TrimPrefix(msg, "'' ")
	msg = strings.TrimPrefix(msg, "error decoding '': ")
	if n, err := strconv.Unquote(msg); err == nil {
		msg = n
	}
	return errors.New(msg)
}

// check reports problems that involve a key's meaning or several keys.
func (c Config) check() Problems {
	var p Problems
	for name, spec := range map[string]string{
		"conductor.takeover_schedule":     c.Conductor.TakeoverSchedule,
		"placement_backend.sync_schedule": c.PlacementBackend.SyncSchedule,
	} {
		if strings.EqualFold(strings.TrimSpace(spec), ScheduleOff) {
			continue
		}
		if _, err := cron.ParseStandard(spec); err != nil {
			p = append(p, fmt.Sprintf("%s: %q: %v (use a cron spec such as @every 60s, or off)", name, spec, err))
		}
	}
	if c.Conductor.HeartbeatTimeout <= c.Conductor.HeartbeatInterval {
		p = append(p, fmt.Sprintf("conductor.heartbeat_timeout (%s) must exceed conductor.heartbeat_interval (%s)",
			c.Conductor.HeartbeatTimeout, c.Conductor.HeartbeatInterval))
	}
	for name, pair := range map[string][2]string{
		"api.tls_cert_file":               {c.API.TLSCertFile, c.API.TLSKeyFile},
		"placement.tls_cert_file":         {c.Placement.TLSCertFile, c.Placement.TLSKeyFile},
		"conductor.metrics_tls_cert_file": {c.Conductor.MetricsTLSCertFile, c.Conductor.MetricsTLSKeyFile},
	} {
		if (pair[0] == "") != (pair[1] == "") {
			p = append(p, fmt.Sprintf("%s and its key file: set both or neither", name))
		}
	}
	sort.Strings(p)
	return p
}

// listHook reads a list key given as a string (environment, flag, the
// sample's formatted default): YAML flow syntax ("[a, b]") or "a,b"; empty
// items are dropped, so "" is the empty list.
func listHook(from, to reflect.Type, data any) (any, error) {
	s, ok := data.(string)
	if !ok || to.Kind() != reflect.Slice {
		return data, nil
	}
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "[") {
		var out []string
		if err := yaml.Unmarshal([]byte(s), &out); err != nil {
			return nil, fmt.Errorf("%q is not a YAML list: %w", s, err)
		}
		return out, nil
	}
	out := []string{}
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out, nil
}
