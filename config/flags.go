package config

import (
	"reflect"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// AddFlags adds a --section.key flag to fs for every key keep selects
// (ReadBy(binary), or every key with nil) that fs does not have yet. The
// flags are typed as their keys, show the default in --help, and count
// only when set (Load ignores flags left alone, so the file and the
// environment still apply).
func AddFlags(fs *pflag.FlagSet, keep func(*Key) bool) {
	for _, k := range Keys() {
		name := k.Flag()
		if (keep != nil && !keep(k)) || fs.Lookup(name) != nil {
			continue
		}
		usage := k.usage()
		t := k.typ
		if t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		def := reflect.Zero(t)
		if k.Default != nil {
			def = reflect.ValueOf(k.Default).Convert(t)
		}
		switch {
		case t == reflect.TypeFor[time.Duration]():
			fs.Duration(name, def.Interface().(time.Duration), usage)
			fs.Lookup(name).DefValue = formatDuration(def.Interface().(time.Duration)) // "60s", not "1m0s"
		case t.Kind() == reflect.String:
			fs.String(name, def.String(), usage)
		case t.Kind() == reflect.Bool:
			fs.Bool(name, def.Bool(), usage)
		case t.Kind() == reflect.Int || t.Kind() == reflect.Int32 || t.Kind() == reflect.Int64:
			fs.Int64(name, def.Int(), usage)
		case t.Kind() == reflect.Float64:
			fs.Float64(name, def.Float(), usage)
		default: // maps: "K=V,K=V" or YAML flow syntax; lists: "A,B"
			fs.String(name, "", usage)
		}
	}
	// Removed keys keep a hidden flag, so that Load can say what replaced
	// them rather than pflag "unknown flag".
	for name, r := range removedKeys {
		if (keep != nil && !keep(&Key{Name: name, Readers: r.readers})) || fs.Lookup(name) != nil {
			continue
		}
		fs.String(name, "", "removed")
		_ = fs.MarkHidden(name)
	}
}

// ReadBy selects the keys binary b reads, for AddFlags.
func ReadBy(b Binary) func(*Key) bool { return func(k *Key) bool { return k.ReadBy(b) } }

// usage is the flag's help: the description's first sentence, and the
// default when it is not a fixed value.
func (k *Key) usage() string {
	s := firstSentence(strings.ReplaceAll(k.Doc, "`", "")) // pflag takes a `word` for the value's name
	s = strings.TrimSuffix(s, ".")
	if len(k.Values) > 0 {
		s += " (" + strings.Join(k.Values, ", ") + ")"
	}
	if k.DefaultText != "" {
		s += " (default " + k.DefaultText + ")"
	}
	return s
}

// firstSentence is s up to the first ". " that ends a sentence: not one
// inside parentheses nor after "e.g" or "i.e", which cut three ratio
// keys' help at "(e.g" before.
func firstSentence(s string) string {
	depth := 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth = max(depth-1, 0)
		case '.':
			before := strings.ToLower(s[:i])
			if depth == 0 && strings.HasPrefix(s[i:], ". ") &&
				!strings.HasSuffix(before, "e.g") && !strings.HasSuffix(before, "i.e") {
				return s[:i]
			}
		}
	}
	return s
}
