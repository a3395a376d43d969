package config

import (
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// FormatValue writes a value of key k as the sample file and docs/configuration.md
// show it: durations with their unit ("60s", "1h", "15ms"), floats with a
// decimal point, strings quoted for YAML when they need it ("" always).
func FormatValue(k *Key, v any) string {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() || (rv.Kind() == reflect.Pointer || rv.Kind() == reflect.Map) && rv.IsNil() {
		return ""
	}
	if rv.Kind() == reflect.Pointer {
		rv = rv.Elem()
	}
	switch x := rv.Interface().(type) {
	case time.Duration:
		return formatDuration(x)
	case float64:
		return formatFloat(x)
	case string:
		return yamlString(x)
	case map[string]float64:
		parts := make([]string, 0, len(x))
		for _, name := range sortedKeys(anyMap(x)) {
			parts = append(parts, name+": "+formatFloat(x[name]))
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case []string:
		parts := make([]string, len(x))
		for i, item := range x {
			parts[i] = yamlString(item)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	}
	return fmt.Sprint(rv.Interface())
}

func anyMap(m map[string]float64) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func formatDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	case d%time.Millisecond == 0:
		return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms"
	}
	return d.String()
}

func formatFloat(f float64) string {
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	return s
}

var plainYAML = regexp.MustCompile(`^[A-Za-z0-9_./:?=&+-]*[A-Za-z0-9_./?=&+-]$`)

// yamlString quotes s when YAML would not read it back as the same string.
func yamlString(s string) string {
	switch strings.ToLower(s) {
	case "true", "false", "yes", "no", "on", "off", "null", "~":
		return strconv.Quote(s)
	}
	if plainYAML.MatchString(s) && !strings.Contains(s, ": ") {
		if _, err := strconv.ParseFloat(s, 64); err != nil {
			return s
		}
	}
	return strconv.Quote(s)
}
