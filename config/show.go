package config

import (
	"fmt"
	"io"
	"net/url"
	"regexp"
	"text/tabwriter"
)

// Masked is what config show prints for a secret that is set.
const Masked = "****"

// Display is v's value as `metalloc-manage config show` prints it: formatted
// as in the sample file, secrets masked (a database URL keeps everything
// but its password), "(unset)" for keys without a value.
func (v Value) Display() string {
	s := FormatValue(v.Key, v.Value)
	if s == "" && v.Key.Default == nil {
		return "(unset)"
	}
	if !v.Key.Secret || s == "" || s == `""` {
		return s
	}
	if v.Key.Name == "database.url" {
		return MaskDatabaseURL(fmt.Sprint(v.Value))
	}
	return Masked
}

var dsnPassword = regexp.MustCompile(`(?i)(\bpassword\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)

// MaskDatabaseURL replaces the password of a libpq URL or key=value DSN
// with Masked.
func MaskDatabaseURL(s string) string {
	if u, err := url.Parse(s); err == nil && u.Scheme != "" {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), Masked)
		}
		q := u.Query()
		if q.Has("password") {
			q.Set("password", Masked)
			u.RawQuery = q.Encode()
		}
		out, _ := url.PathUnescape(u.String())
		return out
	}
	return dsnPassword.ReplaceAllString(s, "${1}"+Masked)
}

// Source is where key name's value came from (SourceDefault for an
// unknown name).
func (e *Effective) Source(name string) Source {
	for _, v := range e.Values {
		if v.Key.Name == name {
			return v.Source
		}
	}
	return SourceDefault
}

// WriteTable prints every key's effective value and its source (and
// origin: the file, the variable, the flag) as aligned columns.
func (e *Effective) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tVALUE\tSOURCE")
	for _, v := range e.Values {
		src := string(v.Source)
		if v.Origin != "" {
			src += " " + v.Origin
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", v.Key.Name, v.Display(), src)
	}
	return tw.Flush()
}
