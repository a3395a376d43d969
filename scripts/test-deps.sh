#!/usr/bin/env bash
# Installs what the test suite runs besides Go and PostgreSQL (which the
# embedded cluster installs itself): the reference OpenStack Placement 8.0
# from Debian's packages (devstack.StartOpenStackPlacement, used by the
# placement-backend tests), Keystone 22 (devstack.StartKeystone, the
# authentication end-to-end tests), Ironic 21.4 with its PostgreSQL driver
# (devstack.StartIronic: metalloc in front of Ironic), the openstack CLI with its baremetal,
# placement and reservation plugins (driven by those tests as a user would;
# python3-blazarclient 3.5 for e2e TestBlazarClient*), gabbi (the
# runner of Placement's upstream suite, e2e TestPlacementUpstreamSuite),
# pytest and oslotest (osc-placement's functional tests, e2e
# TestOSCPlacementSuite),
# systemd-analyze (configs/systemd_test.go), headless Chromium (the operator
# page's browser test, e2e TestOperatorPage) and promtool from the
# prometheus package (the alert rules and dashboard queries, e2e
# TestDashboardMetrics), lintian (scripts/deb-check.sh checks the Debian
# package with it), and tempest with oslotest and pytest (the runner of
# python-ironicclient's functional tests, e2e TestIronicclientFunctional),
# and Patroni 3.0 with its etcd client and etcd 3.4 (package
# internal/patroni: PostgreSQL under Patroni, e2e TestPatroniFailover and
# TestDevUpHA; Debian's patroni package recommends no DCS client, so
# python3-etcd is named here; on a host with systemd, installing
# etcd-server also enables and starts its etcd.service on 2379, which the
# tests do not use: they start their own members on free ports).
# Does nothing when they are present; needs root (or sudo) otherwise.
set -euo pipefail
pkgs=()
command -v placement-manage >/dev/null || pkgs+=(python3-placement placement-api)
command -v gunicorn >/dev/null || pkgs+=(gunicorn python3-gunicorn)
command -v keystone-manage >/dev/null || pkgs+=(python3-keystone)
command -v ironic-api >/dev/null || pkgs+=(ironic-api)
command -v ironic-conductor >/dev/null || pkgs+=(ironic-conductor)
/usr/bin/python3 -c 'import psycopg2' 2>/dev/null || pkgs+=(python3-psycopg2)
command -v openstack >/dev/null || pkgs+=(python3-openstackclient)
/usr/bin/python3 -c 'import ironicclient' 2>/dev/null || pkgs+=(python3-ironicclient)
/usr/bin/python3 -c 'import osc_placement' 2>/dev/null || pkgs+=(python3-osc-placement)
/usr/bin/python3 -c 'import blazarclient' 2>/dev/null || pkgs+=(python3-blazarclient)
/usr/bin/python3 -c 'import gabbi' 2>/dev/null || pkgs+=(python3-gabbi)
/usr/bin/python3 -c 'import pytest' 2>/dev/null || pkgs+=(python3-pytest)
/usr/bin/python3 -c 'import oslotest' 2>/dev/null || pkgs+=(python3-oslotest)
/usr/bin/python3 -c 'import tempest' 2>/dev/null || pkgs+=(python3-tempest)
command -v systemd-analyze >/dev/null || pkgs+=(systemd)
command -v chromium >/dev/null || pkgs+=(chromium)
command -v promtool >/dev/null || pkgs+=(prometheus)
command -v lintian >/dev/null || pkgs+=(lintian)
command -v patroni >/dev/null || pkgs+=(patroni)
/usr/bin/python3 -c 'import etcd' 2>/dev/null || pkgs+=(python3-etcd)
command -v etcd >/dev/null || pkgs+=(etcd-server)
[ ${#pkgs[@]} -eq 0 ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing test dependencies from Debian's packages: ${pkgs[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q "${pkgs[@]}"
