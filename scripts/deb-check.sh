#!/usr/bin/env bash
# CI's check of the Debian package (.ci/run; as root on a Debian machine
# with systemd installed): make deb, lintian without errors (overrides in
# packaging/lintian-overrides, each with its reason), apt-get install of the
# .deb, each installed binary's --version, the user metalloc and the
# conffile, and systemd-analyze verify on the installed units (complaints
# about other units the machine has are printed, not fatal: see
# configs/systemd_test.go).
set -euo pipefail
cd "$(dirname "$0")/.."
rm -f metalloc_*_amd64.deb
make deb
deb=$(ls metalloc_*_amd64.deb)
echo "== lintian $deb"
lintian --fail-on error --display-info "$deb"
echo "== apt-get install ./$deb"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q "./$deb"
version=$(dpkg-query -W -f '${Version}' metalloc)
for b in api conductor placement manage; do
	out=$(/usr/bin/metalloc-$b --version)
	echo "$out"
	case "$out" in
	"metalloc-$b $version "*) ;;
	*) echo "metalloc-$b --version does not name the package version $version" >&2; exit 1 ;;
	esac
done
getent passwd metalloc >/dev/null || { echo "the package did not create the user metalloc" >&2; exit 1; }
grep -qx ' /etc/metalloc/metalloc.yaml [0-9a-f]*' <(dpkg-query -W -f '${Conffiles}\n' metalloc) ||
	{ echo "/etc/metalloc/metalloc.yaml is not a conffile" >&2; exit 1; }
[ "$(stat -c %G:%a /etc/metalloc/metalloc.yaml)" = metalloc:640 ] ||
	{ echo "/etc/metalloc/metalloc.yaml is $(stat -c %U:%G:%a /etc/metalloc/metalloc.yaml), not root:metalloc:640" >&2; exit 1; }
echo "== systemd-analyze verify"
status=0
for u in metalloc-api.service metalloc-conductor@1.service metalloc-placement.service; do
	out=$(SYSTEMD_LOG_COLOR=0 systemd-analyze verify "$u" 2>&1) || true
	ours=$(grep 'metalloc-' <<<"$out" || true)
	others=$(grep -v 'metalloc-' <<<"$out" || true)
	[ -n "$others" ] && printf 'about other units (ignored):\n%s\n' "$others"
	if [ -n "$ours" ]; then printf '%s:\n%s\n' "$u" "$ours" >&2; status=1; else echo "$u: verified"; fi
done
exit $status
