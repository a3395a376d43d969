package config

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

// writeFile writes a config file and returns its path.
func writeFile(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "metalloc.yaml")
	require.NoError(t, os.WriteFile(path, []byte(text), 0o600))
	return path
}

// TestRegistry: every key is defined once with a description, readers and
// a default of its field's type; every field of Config has a key.
func TestRegistry(t *testing.T) {
	t.Parallel()
	envs := map[string]string{}
	for _, k := range Keys() {
		require.NotEmpty(t, k.Doc, k.Name)
		require.NotEmpty(t, k.Readers, k.Name)
		require.True(t, strings.HasSuffix(k.Doc, "."), "%s: the description ends with a full stop", k.Name)
		if k.Default != nil {
			require.True(t, reflect.TypeOf(k.Default).ConvertibleTo(k.typ), "%s: default %T for a %s", k.Name, k.Default, k.typ)
		} else {
			require.NotEmpty(t, k.DefaultText, "%s: no default and no words for it", k.Name)
		}
		require.Empty(t, envs[k.Env()], "%s and %s share %s", k.Name, envs[k.Env()], k.Env())
		envs[k.Env()] = k.Name
	}
	d := Defaults()
	require.Equal(t, DefaultConductorWorkers, d.Conductor.Workers)
	require.Equal(t, DefaultAPIMaxWait, d.API.MaxWait)
	require.True(t, d.API.EnforceScope)
	require.False(t, d.Placement.EnforceScope)
	require.Nil(t, d.PlacementBackend.CPUAllocationRatio)
}

// value is a valid value for k other than its default, as a string (an
// environment variable's or a flag's), and the field value it gives.
func value(k *Key, i int) (string, any) {
	t := k.typ
	optional := t.Kind() == reflect.Pointer
	if optional {
		t = t.Elem()
	}
	var s string
	var v any
	switch {
	case len(k.Values) > 0:
		s = k.Values[len(k.Values)-1]
		if s == k.Default {
			s = k.Values[0]
		}
		v = s
	case strings.HasPrefix(fmt.Sprint(k.Default), "@every"):
		s, v = "@every 7s", "@every 7s"
	case t == reflect.TypeFor[time.Duration]():
		d := time.Duration(i+1) * time.Second
		s, v = d.String(), d
	case t.Kind() == reflect.String:
		s, v = "x-"+k.Name, "x-"+k.Name
	case t.Kind() == reflect.Bool:
		b := k.Default != true
		s, v = fmt.Sprint(b), b
	case t.Kind() == reflect.Int, t.Kind() == reflect.Int32, t.Kind() == reflect.Int64:
		s, v = fmt.Sprint(i+1000), reflect.ValueOf(i+1000).Convert(t).Interface()
	case t.Kind() == reflect.Float64:
		s, v = "2.5", 2.5
	case t.Kind() == reflect.Map:
		s, v = "CUSTOM_A=1.5,CUSTOM_B=2", map[string]float64{"CUSTOM_A": 1.5, "CUSTOM_B": 2}
	case t.Kind() == reflect.Slice:
		s, v = "10.0.0.0/8, 192.0.2.7", []string{"10.0.0.0/8", "192.0.2.7"}
	}
	if optional {
		p := reflect.New(t)
		p.Elem().Set(reflect.ValueOf(v))
		v = p.Interface()
	}
	return s, v
}

// requireEveryValue resolves the configuration with fs and requires every
// key to have value's value, from source.
func requireEveryValue(t *testing.T, fs *pflag.FlagSet, source Source) *Effective {
	t.Helper()
	e, err := Resolve("", fs)
	require.NoError(t, err)
	for i, v := range e.Values {
		_, want := value(v.Key, i)
		require.Equal(t, want, v.Value, v.Key.Name)
		require.Equal(t, source, v.Source, v.Key.Name)
	}
	return e
}

// TestEnvironmentSetsEveryKey: every key's METALLOC_<SECTION>_<KEY>
// variable sets it, including the keys that have no default (the
// optional ratios, the ratio maps), which viper's AutomaticEnv ignored.
func TestEnvironmentSetsEveryKey(t *testing.T) {
	for i, k := range Keys() {
		s, _ := value(k, i)
		t.Setenv(k.Env(), s)
	}
	e := requireEveryValue(t, nil, SourceEnv)
	require.Equal(t, 2.5, *e.Config.PlacementBackend.CPUAllocationRatio)
	require.Equal(t, map[string]float64{"CUSTOM_A": 1.5, "CUSTOM_B": 2}, e.Config.PlacementBackend.AllocationRatios)
}

// TestFlagsSetEveryKey: every key has a typed --section.key flag (AddFlags)
// that sets it; flags left alone leave the file and environment in force.
func TestFlagsSetEveryKey(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	AddFlags(fs, nil)
	var args []string
	for i, k := range Keys() {
		s, _ := value(k, i)
		args = append(args, "--"+k.Flag()+"="+s)
	}
	require.NoError(t, fs.Parse(args))
	requireEveryValue(t, fs, SourceFlag)

	fs = pflag.NewFlagSet("t", pflag.ContinueOnError)
	AddFlags(fs, nil)
	require.NoError(t, fs.Parse(nil))
	t.Setenv("METALLOC_API_MAX_WAIT", "5s")
	cfg, err := Load(writeFile(t, "api:\n  max_limit: 7\n"), fs)
	require.NoError(t, err)
	require.Equal(t, 5*time.Second, cfg.API.MaxWait)
	require.Equal(t, 7, cfg.API.MaxLimit)
	require.Equal(t, DefaultAPIRequestTimeout, cfg.API.RequestTimeout)
}

// TestFlagsOfEachBinary: each binary takes a flag for every key it reads
// (the README promised --api.max_wait, --log.level, --api.public_endpoint,
// which were "unknown flag") and none for keys it does not read.
func TestFlagsOfEachBinary(t *testing.T) {
	t.Parallel()
	for _, b := range Binaries {
		fs := pflag.NewFlagSet(string(b), pflag.ContinueOnError)
		AddFlags(fs, ReadBy(b))
		for _, k := range Keys() {
			require.Equal(t, k.ReadBy(b), fs.Lookup(k.Flag()) != nil, "%s --%s", b, k.Flag())
		}
		require.NotNil(t, fs.Lookup("log.level"), b)
		require.NotNil(t, fs.Lookup("database.url"), b)
	}
	fs := pflag.NewFlagSet("api", pflag.ContinueOnError)
	AddFlags(fs, ReadBy(BinaryAPI))
	require.NoError(t, fs.Parse([]string{"--api.max_wait", "5s", "--log.level", "debug", "--api.public_endpoint", "https://x"}))
	cfg, err := Load("", fs)
	require.NoError(t, err)
	require.Equal(t, 5*time.Second, cfg.API.MaxWait)
	require.Equal(t, "debug", cfg.Log.Level)
	require.Equal(t, "https://x", cfg.API.PublicEndpoint)
	require.Contains(t, fs.FlagUsages(), "--api.max_wait duration")
	require.Contains(t, fs.FlagUsages(), "(default 60s)")
}

// TestFlagUsageWholeSentence: each flag's help is its key's first whole
// sentence: never cut inside parentheses or at "e.g." (the three
// *_allocation_ratio flags ended in "(e.g").
func TestFlagUsageWholeSentence(t *testing.T) {
	t.Parallel()
	for _, k := range Keys() {
		u := k.usage()
		require.Equal(t, strings.Count(u, "("), strings.Count(u, ")"), "--%s: %s", k.Flag(), u)
		require.NotRegexp(t, `(?i)\b(e\.g|i\.e)$`, strings.TrimSuffix(u, " (default "+k.DefaultText+")"), k.Flag())
	}
	k := Lookup("placement_backend.cpu_allocation_ratio")
	require.Equal(t, "When set (above 0), the allocation ratio of VCPU on every sync; unset keeps the ratio a provider has "+
		"(e.g. one an operator set through the Placement API) (default unset)", k.usage())
	require.Equal(t, "Connection pool size of each process", Lookup("database.max_conns").usage())
}

// TestUnknownKeysInFile: a misspelt key or section is an error naming the
// nearest valid key, with every problem listed; the ratio maps' sub-keys
// are free.
func TestUnknownKeysInFile(t *testing.T) {
	t.Parallel()
	path := writeFile(t, `api:
  max_wiat: 5s
conductr:
  workers: 3
placement_backend:
  allocation_ratios: {CUSTOM_GOLD: 1.5, custom_silver: 2}
  initial_allocation_ratios:
    CUSTOM_GOLD: 1.0
  endpoint:
    url: http://x
log: debug
lgo:
`)
	_, err := Load(path, nil)
	var p Problems
	require.ErrorAs(t, err, &p)
	require.Equal(t, Problems{
		"unknown key api.max_wiat; did you mean api.max_wait? (in " + path + ")",
		"unknown key conductr.workers; did you mean conductor.workers? (in " + path + ")",
		"unknown section lgo; did you mean log? (in " + path + ")",
		"log: a section, not a value (in " + path + ")",
		"placement_backend.endpoint: a value, not a section (in " + path + ")",
	}, p)
	require.Contains(t, err.Error(), "configuration: 5 problems:\n  unknown key api.max_wiat; did you mean api.max_wait?")

	cfg, err := Load(writeFile(t, "placement_backend:\n  allocation_ratios: {CUSTOM_GOLD: 1.5}\n"), nil)
	require.NoError(t, err)
	require.Equal(t, map[string]float64{"custom_gold": 1.5}, cfg.PlacementBackend.AllocationRatios)
}

// TestBadValues: values of the wrong type or outside a key's values, and
// contradicting keys, are problems naming the key and the source.
func TestBadValues(t *testing.T) {
	path := writeFile(t, `api:
  max_wait: 60
  max_limit: lots
  auth_strategy: kerberos
conductor:
  takeover_schedule: "every minute"
  heartbeat_interval: 2m
`)
	t.Setenv("METALLOC_LOG_LEVEL", "verbose")
	_, err := Load(path, nil)
	var p Problems
	require.ErrorAs(t, err, &p)
	msg := p.Error()
	for _, want := range []string{
		"api.max_wait: 60 has no unit (write 60s or 60ms) (in " + path + ")",
		"api.max_limit: ",
		`api.auth_strategy: "kerberos" is not one of noauth, http_basic, keystone (in ` + path + ")",
		`log.level: "verbose" is not one of debug, info, warn, error (environment variable METALLOC_LOG_LEVEL)`,
		`conductor.takeover_schedule: "every minute": `,
		"conductor.heartbeat_timeout (1m0s) must exceed conductor.heartbeat_interval (2m0s)",
	} {
		require.Contains(t, msg, want)
	}
	require.Len(t, p, 6, msg)
}

// TestUnknownEnvironmentVariables: a METALLOC_ variable that sets no key
// is an error naming the nearest key's variable; other variables
// (DATABASE_URL, PATH) and the known non-configuration METALLOC_ ones are
// fine.
func TestUnknownEnvironmentVariables(t *testing.T) {
	t.Setenv("METALLOC_API_MAX_WIAT", "5s")
	t.Setenv("METALLOC_CONDUCTR_WORKERS", "5")
	t.Setenv("METALLOC_WHATEVER_THIS_IS", "1")
	t.Setenv("DATABASE_URL", "postgres://x@h/db")
	t.Setenv("METALLOC_API_USERNAME", "operator")
	t.Setenv("METALLOC_BENCH_NODES", "10")
	t.Setenv("METALLOC_TEST_ANYTHING", "1")
	_, err := Load("", nil)
	require.Equal(t, Problems{
		"unknown environment variable METALLOC_API_MAX_WIAT; did you mean METALLOC_API_MAX_WAIT (key api.max_wait)?",
		"unknown environment variable METALLOC_CONDUCTR_WORKERS; did you mean METALLOC_CONDUCTOR_WORKERS (key conductor.workers)?",
		"unknown environment variable METALLOC_WHATEVER_THIS_IS; variables are METALLOC_<SECTION>_<KEY> for the keys of configs/metalloc.yaml",
	}, err)
}

// TestSourcesAndMasking: config show's table gives each key's value and
// source (default, file, env, flag), DATABASE_URL as database.url's
// default, and masks secrets (the database URL's password only).
func TestSourcesAndMasking(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://metalloc:s3cret@db:5432/metalloc?sslmode=disable")
	t.Setenv("METALLOC_CONDUCTOR_WORKERS", "32")
	path := writeFile(t, "api:\n  max_wait: 30s\nkeystone:\n  password: hunter2\n")
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	AddFlags(fs, nil)
	require.NoError(t, fs.Parse([]string{"--log.level=debug"}))
	e, err := Resolve(path, fs)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, e.WriteTable(&out))
	text := out.String()
	for _, re := range []string{
		`(?m)^database\.url +postgres://metalloc:\*\*\*\*@db:5432/metalloc\?sslmode=disable +env DATABASE_URL$`,
		`(?m)^conductor\.workers +32 +env METALLOC_CONDUCTOR_WORKERS$`,
		`(?m)^api\.max_wait +30s +file ` + regexpQuote(path) + `$`,
		`(?m)^keystone\.password +\*\*\*\* +file `,
		`(?m)^log\.level +debug +flag --log\.level$`,
		`(?m)^api\.listen +127\.0\.0\.1:6385 +default$`,
		`(?m)^placement_backend\.token +\*\*\*\* +default$`,
		`(?m)^placement_backend\.cpu_allocation_ratio +\(unset\) +default$`,
		`(?m)^conductor\.takeover_schedule +"@every 60s" +default$`,
	} {
		require.Regexp(t, re, text)
	}
	require.NotContains(t, text, "s3cret")
	require.NotContains(t, text, "hunter2")
	require.Equal(t, "host=db user=u password=**** dbname=m", MaskDatabaseURL("host=db user=u password=pw dbname=m"))
	require.Equal(t, "host=db password=**** dbname=m", MaskDatabaseURL("host=db password='p w' dbname=m"))
	require.Equal(t, "postgres://u@db/m?password=****", MaskDatabaseURL("postgres://u@db/m?password=pw"))
}

func regexpQuote(s string) string {
	return strings.NewReplacer(".", `\.`, "/", `/`).Replace(s)
}

// TestSampleValuesReadBack: the formatted defaults read back as the same
// values (the sample file and config show print them).
func TestSampleValuesReadBack(t *testing.T) {
	t.Parallel()
	for _, k := range Keys() {
		if k.Default == nil {
			continue
		}
		s := FormatValue(k, k.Default)
		field := reflect.New(k.typ).Elem()
		var raw any = s
		if len(s) > 1 && s[0] == '"' {
			raw = s[1 : len(s)-1]
		}
		require.NoError(t, decodeInto(raw, field), k.Name)
		require.Equal(t, reflect.ValueOf(k.Default).Convert(k.typ).Interface(), field.Interface(), k.Name)
	}
}

// TestRemovedKey (issue 40): ironic.max_attempts, replaced by
// ironic.allocation_timeout, set in the file, the environment or a flag is
// a problem saying what replaced it, not "unknown key" (or a setting
// silently ignored); the binaries that read it keep a hidden flag for it.
func TestRemovedKey(t *testing.T) {
	why := "ironic.max_attempts was removed (a node Ironic refuses is read again from Ironic at once and other nodes " +
		"are tried while any fits, for up to ironic.allocation_timeout): delete it"
	path := writeFile(t, "ironic:\n  max_attempts: 5\n  allocation_timeout: 90s\n")
	t.Setenv("METALLOC_IRONIC_MAX_ATTEMPTS", "5")
	fs := pflag.NewFlagSet("conductor", pflag.ContinueOnError)
	AddFlags(fs, ReadBy(BinaryConductor))
	require.NotContains(t, fs.FlagUsages(), "ironic.max_attempts", "hidden")
	require.NoError(t, fs.Parse([]string{"--ironic.max_attempts", "5"}))
	cfg, err := Load(path, fs)
	require.Equal(t, Problems{
		why + " (environment variable METALLOC_IRONIC_MAX_ATTEMPTS)",
		why + " (flag --ironic.max_attempts)",
		why + " (in " + path + ")",
	}, sorted(err))
	require.Equal(t, 90*time.Second, cfg.Ironic.AllocationTimeout)

	fs = pflag.NewFlagSet("placement", pflag.ContinueOnError)
	AddFlags(fs, ReadBy(BinaryPlacement))
	require.Nil(t, fs.Lookup("ironic.max_attempts"), "metalloc-placement never read it")
}

// sorted is err's problems in order.
func sorted(err error) Problems {
	var p Problems
	if !errors.As(err, &p) {
		return nil
	}
	p = slices.Clone(p)
	slices.Sort(p)
	return p
}
