package web

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/labstack/echo/v4"
)

// forwardingHeaders are the request headers through which a reverse proxy
// tells the original client, scheme and host: echo reads the scheme
// (c.Scheme, and so every link and Location header) from
// X-Forwarded-Proto, X-Forwarded-Protocol, X-Forwarded-Ssl and
// X-Url-Scheme, the client address (c.RealIP) from X-Forwarded-For and
// X-Real-Ip; Forwarded is RFC 7239's form of them all.
var forwardingHeaders = []string{
	"Forwarded", "X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Protocol", "X-Forwarded-Ssl",
	"X-Url-Scheme", "X-Forwarded-Host", "X-Real-Ip",
}

// ParseTrustedProxies parses the {api,placement}.trusted_proxies setting:
// CIDRs ("10.0.0.0/8", "fd00::/8") or single addresses ("192.0.2.7").
// key names the setting in errors.
func ParseTrustedProxies(key string, list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is neither a CIDR nor an IP address", key, s)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	return out, nil
}

// TrustForwarded is echo Pre middleware that keeps the forwarding headers
// (X-Forwarded-Proto, X-Forwarded-For, Forwarded, ...; see
// forwardingHeaders) only on requests whose peer, the address the TCP
// connection comes from, is in one of trusted (the configured reverse
// proxies); from anyone else they are removed before anything reads them,
// so a client cannot choose the scheme of the links it is sent or the
// address it is logged as. With none trusted (the default) they are
// always removed. From a trusted proxy, Forwarded's proto= stands in for
// a missing X-Forwarded-Proto.
func TrustForwarded(trusted []netip.Prefix) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			if peerTrusted(r, trusted) {
				if r.Header.Get("X-Forwarded-Proto") == "" {
					if proto := forwardedProto(r.Header.Values("Forwarded")); proto != "" {
						r.Header.Set("X-Forwarded-Proto", proto)
					}
				}
				return next(c)
			}
			for _, h := range forwardingHeaders {
				r.Header.Del(h)
			}
			return next(c)
		}
	}
}

// TrustProxies makes e believe forwarding headers from the trusted peers
// only: TrustForwarded as Pre middleware, and echo's scheme and client
// address extractors (whose defaults trust any loopback, link-local or
// private-network peer) limited to them.
func TrustProxies(e *echo.Echo, trusted []netip.Prefix) {
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, p := range trusted {
		_, n, err := net.ParseCIDR(p.String())
		if err == nil {
			opts = append(opts, echo.TrustIPRange(n))
		}
	}
	e.IPExtractor = echo.ExtractIPFromXFFHeader(opts...)
	e.SchemeExtractor = echo.ExtractSchemeFromHeaders(opts...)
	e.Pre(TrustForwarded(trusted))
}

func peerTrusted(r *http.Request, trusted []netip.Prefix) bool {
	if len(trusted) == 0 {
		return false
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	a := ap.Addr().Unmap()
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// forwardedProto is the proto= of the first element of RFC 7239 Forwarded
// headers (the client side), "" if none.
func forwardedProto(values []string) string {
	if len(values) == 0 {
		return ""
	}
	first, _, _ := strings.Cut(values[0], ",")
	for _, pair := range strings.Split(first, ";") {
		k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if ok && strings.EqualFold(k, "proto") {
			val = strings.ToLower(strings.Trim(val, `"`))
			if val == "http" || val == "https" {
				return val
			}
		}
	}
	return ""
}
