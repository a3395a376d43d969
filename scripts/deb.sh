#!/usr/bin/env bash
# make deb: metalloc_<version>_amd64.deb in the repository root, with nfpm
# (github.com/goreleaser/nfpm, run through the Go module proxy with go run,
# pinned) from packaging/nfpm.yaml: the four binaries (static, no cgo, PIE,
# stripped of debug info), the systemd units, /etc/metalloc/metalloc.yaml as
# a conffile, the docs, the copyright file and the postinst that creates the
# user metalloc.
#
# The version must be a Debian version: a tag vX.Y.Z gives X.Y.Z, otherwise
# 0.0.0~git<commit time, UTC, YYYYMMDDhhmmss>.<commit> (+dirty with uncommitted changes), which
# sorts below any release. VERSION=... overrides it. The binaries report
# the same version (--version, metalloc_build_info).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
NFPM=github.com/goreleaser/nfpm/v2/cmd/nfpm@v2.45.2
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
dirty=""
git diff --quiet HEAD 2>/dev/null || dirty="+dirty"
if [ -z "${VERSION:-}" ]; then
	if tag=$(git describe --tags --exact-match --match 'v[0-9]*' 2>/dev/null); then
		VERSION=${tag#v}$dirty
	else
		VERSION="0.0.0~git$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S 2>/dev/null || date -u +%Y%m%d%H%M%S).${commit:0:7}$dirty"
	fi
fi
if ! [[ $VERSION =~ ^[0-9][A-Za-z0-9.+~]*$ ]]; then
	echo "make deb: $VERSION is not a Debian version (digits first, then letters, digits, . + ~)" >&2
	exit 1
fi
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
date=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
out=build/deb
rm -rf "$out"
mkdir -p "$out/bin" "$out/doc"
bi=github.com/metalloc/metalloc/buildinfo
for c in api conductor manage placement; do
	echo "building $out/bin/metalloc-$c"
	CGO_ENABLED=0 $GO build -trimpath -buildmode=pie \
		-ldflags "-s -w -X $bi.version=$VERSION -X $bi.commit=$commit${dirty:+-dirty} -X $bi.date=$date" \
		-o "$out/bin/metalloc-$c" "./cmd/$c"
done
for f in README.md docs/*.md; do
	gzip -9n <"$f" >"$out/doc/$(basename "$f").gz"
done
{
	echo "metalloc ($VERSION) unstable; urgency=medium"
	echo
	echo "  * Built from commit ${commit:0:12} of the metalloc repository;"
	echo "    its history is the change log."
	echo
	echo " -- metalloc developers <metalloc@users.noreply.github.com>  $(date -u -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n >"$out/doc/changelog.gz"
echo "packaging metalloc $VERSION with nfpm"
METALLOC_DEB_VERSION=$VERSION $GO run $NFPM package --config packaging/nfpm.yaml --packager deb --target .
ls -l "metalloc_${VERSION}_amd64.deb"
