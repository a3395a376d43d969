#!/usr/bin/python3
"""Side-by-side conformance sweep: metalloc-placement against OpenStack
Placement 8.0.

Sends the same sequence of requests to a reference Placement (A) and to
metalloc-placement (B), both on EMPTY databases, and compares status codes,
selected headers and JSON bodies after normalising uuids the servers make
up, timestamps and request ids.

    /work/shared/reference/run-placement.sh reset        # empty reference
    bin/metalloc-manage dev exec -- bin/metalloc-placement \
        --placement.listen 127.0.0.1:18799 &                # fresh metalloc
    scripts/placement-compare.py --a http://127.0.0.1:8778 \
        --b http://127.0.0.1:18799 [-v] [--only PATTERN]

Request bodies may say "@gen:<provider uuid>" for that provider's current
generation on each server (read with an extra, uncompared GET). --trace
prints both answers to every request.

Error details are compared loosely: a difference only in the normalised
"detail" text is reported as "soft" and not counted as a difference
(use --strict-detail to count them). Exit status 1 when anything differs.

Known deliberate differences (listed in docs/api-compatibility.md) are
marked "expected" and not counted either.

Standard library only.
"""

import argparse
import json
import re
import sys
import urllib.error
import urllib.request
import uuid as uuidlib

UUID_RE = re.compile(r"[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?"
                     r"[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}")
TS_RE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:?\d\d)?")
REQID_RE = re.compile(r"req-[0-9a-fA-F-]{36}")


class Step:
    def __init__(self, method, path, ver=None, body=None, raw=None,
                 headers=None, note="", expected=None, token="admin"):
        self.method = method
        self.path = path
        self.ver = ver
        self.body = body
        self.raw = raw
        self.headers = headers or {}
        self.note = note
        self.expected = expected  # reason when a difference is deliberate
        self.token = token

    def label(self):
        v = self.ver if self.ver is not None else "-"
        return "%s %s @%s %s" % (self.method, self.path, v, self.note)


def U():
    return str(uuidlib.uuid4())


def build_steps():
    S = []
    add = lambda *a, **k: S.append(Step(*a, **k))

    RP1, RP2, RP3, RP4, RP5, RP6 = U(), U(), U(), U(), U(), U()
    AGG1, AGG2, AGG3 = U(), U(), U()
    C1, C2, C3, C4, C5, C6 = U(), U(), U(), U(), U(), U()
    P1, US1 = U(), U()
    JSON = {"Content-Type": "application/json"}

    # ---- root, versions, auth -------------------------------------------
    for v in (None, "1.0", "1.14", "1.15", "1.39", "latest"):
        add("GET", "/", v, note="version doc")
    add("GET", "/", "1.40", note="too new")
    add("GET", "/", "2.0", note="major")
    add("GET", "/", "0.9", note="too old")
    add("GET", "/", "1.a", note="bad version")
    add("GET", "/", "  1.5 ", note="spaces")
    add("GET", "/resource_providers", "1.0", token=None, note="no token")
    add("GET", "/resource_providers", "1.0", token="joe:proj", note="non admin")
    add("GET", "/resource_providers", None, headers={"OpenStack-API-Version": "compute 1.5"}, note="other svc")
    add("GET", "/resource_providers", None, headers={"OpenStack-API-Version": "compute 2.1, placement 1.14"}, note="multi svc")
    add("GET", "/resource_providers", "1.39", headers={"Accept": "text/plain"}, note="bad accept")
    add("GET", "/resource_providers", "1.39", headers={"Accept": "application/json"}, note="json accept")
    add("GET", "/resource_providers", "1.39", headers={"Accept": "*/*"}, note="any accept")
    add("GET", "/resource_providers", "1.39", headers={"Accept": "text/html, application/json;q=0.5"}, note="mixed accept")
    add("GET", "/nonexistent", "1.39", note="unknown route")
    add("PATCH", "/resource_providers", "1.39", note="405")
    add("DELETE", "/resource_providers", "1.39", note="405")
    add("POST", "/resource_providers/" + RP1, "1.39", body={}, note="405")
    add("POST", "/traits", "1.39", body={}, note="405")
    add("PATCH", "/usages", "1.39", note="405")
    add("OPTIONS", "/usages", "1.39", note="405")
    add("PUT", "/allocations", "1.39", body={}, note="405")
    add("GET", "/reshaper", "1.39", note="405")

    # ---- resource providers ---------------------------------------------
    add("POST", "/resource_providers", "1.0", body={"name": "rp1", "uuid": RP1}, note="create 1.0")
    add("POST", "/resource_providers", "1.0", body={"name": "rp1", "uuid": U()}, note="dup name")
    add("POST", "/resource_providers", "1.39", body={"name": "rp1x", "uuid": RP1}, note="dup uuid")
    add("POST", "/resource_providers", "1.20", body={"name": "rp2", "uuid": RP2, "parent_provider_uuid": RP1}, note="child 1.20")
    add("POST", "/resource_providers", "1.14", body={"name": "rp3", "uuid": RP3}, note="create 1.14")
    add("POST", "/resource_providers", "1.39", body={"name": "rp-noid"}, note="server uuid")
    add("POST", "/resource_providers", "1.13", body={"name": "rp4", "uuid": RP4, "parent_provider_uuid": RP1}, note="parent before 1.14")
    add("POST", "/resource_providers", "1.39", body={"name": "rp4", "uuid": RP4, "parent_provider_uuid": U()}, note="unknown parent")
    add("POST", "/resource_providers", "1.39", body={"name": "rp4", "uuid": RP4, "parent_provider_uuid": RP4}, note="self parent")
    add("POST", "/resource_providers", "1.39", body={"name": "rp4", "uuid": RP4, "parent_provider_uuid": None}, note="null parent")
    add("POST", "/resource_providers", "1.39", body={"uuid": U()}, note="no name")
    add("POST", "/resource_providers", "1.39", body={"name": ""}, note="empty name")
    add("POST", "/resource_providers", "1.39", body={"name": "x" * 201}, note="long name")
    add("POST", "/resource_providers", "1.39", body={"name": "x" * 200}, note="200 name")
    add("POST", "/resource_providers", "1.39", body={"name": "bad", "uuid": "not-a-uuid"}, note="bad uuid")
    add("POST", "/resource_providers", "1.39", body={"name": "bad", "uuid": RP5.replace("-", "")}, note="dashless uuid")
    add("POST", "/resource_providers", "1.39", body={"name": "bad2", "extra": 1}, note="extra prop")
    add("POST", "/resource_providers", "1.39", body={"name": 5}, note="int name")
    add("POST", "/resource_providers", "1.39", body=[], note="array body")
    add("POST", "/resource_providers", "1.39", raw=b"{bad json", headers=JSON, note="bad json")
    add("POST", "/resource_providers", "1.39", raw=b"", headers=JSON, note="empty body")
    add("POST", "/resource_providers", "1.39", raw=b'{"name": "ct"}', headers={"Content-Type": "text/plain"}, note="bad ctype")
    add("POST", "/resource_providers", "1.39", raw=b'{"name": "ct"}', headers={"Content-Type": ""}, note="no ctype")
    add("POST", "/resource_providers", "1.39", raw=b'{"name": "ct2"}', headers={"Content-Type": "application/json; charset=UTF-8"}, note="charset ctype")
    add("POST", "/resource_providers", "1.39", body={"name": "rp6", "uuid": RP6}, note="rp6")

    for v in ("1.0", "1.1", "1.14", "1.15", "1.20", "1.39"):
        add("GET", "/resource_providers/" + RP2, v, note="get")
    add("GET", "/resource_providers/" + U(), "1.39", note="unknown")
    add("GET", "/resource_providers/notauuid", "1.39", note="not uuid")
    add("GET", "/resource_providers", "1.0", note="list")
    add("GET", "/resource_providers", "1.14", note="list")
    add("GET", "/resource_providers?name=rp1", "1.0", note="name")
    add("GET", "/resource_providers?name=rp1&name=rp2", "1.39", note="dup name")
    add("GET", "/resource_providers?uuid=" + RP1, "1.0", note="uuid")
    add("GET", "/resource_providers?uuid=bogus", "1.39", note="bad uuid")
    add("GET", "/resource_providers?foo=bar", "1.39", note="unknown param")
    add("GET", "/resource_providers?in_tree=" + RP2, "1.14", note="in_tree")
    add("GET", "/resource_providers?in_tree=" + RP2, "1.13", note="in_tree too old")
    add("GET", "/resource_providers?in_tree=" + U(), "1.14", note="in_tree unknown")
    add("GET", "/resource_providers?in_tree=bad", "1.14", note="in_tree bad")
    add("GET", "/resource_providers?member_of=" + AGG1, "1.2", note="member_of old")
    add("GET", "/resource_providers?member_of=in:" + AGG1, "1.3", note="member_of")
    add("GET", "/resource_providers?member_of=bad", "1.3", note="member_of bad")
    add("GET", "/resource_providers?member_of=" + AGG1 + "&member_of=" + AGG2, "1.23", note="member_of multi old")
    add("GET", "/resource_providers?member_of=" + AGG1 + "&member_of=" + AGG2, "1.24", note="member_of multi")
    add("GET", "/resource_providers?member_of=!" + AGG1, "1.31", note="forbidden agg old")
    add("GET", "/resource_providers?member_of=!" + AGG1, "1.32", note="forbidden agg")
    add("GET", "/resource_providers?member_of=!in:" + AGG1 + "," + AGG2, "1.32", note="forbidden agg in")
    add("GET", "/resource_providers?member_of=in:!" + AGG1, "1.32", note="bad forbidden")
    add("GET", "/resource_providers?resources=VCPU:1", "1.3", note="resources old")
    add("GET", "/resource_providers?resources=VCPU:1", "1.4", note="resources")
    add("GET", "/resource_providers?resources=VCPU", "1.4", note="resources bad")
    add("GET", "/resource_providers?resources=VCPU:0", "1.4", note="resources zero")
    add("GET", "/resource_providers?resources=CUSTOM_NOPE:1", "1.4", note="resources unknown rc")
    add("GET", "/resource_providers?resources=VCPU:1,VCPU:2", "1.4", note="resources dup")
    add("GET", "/resource_providers?required=HW_CPU_X86_AVX", "1.17", note="required old")
    add("GET", "/resource_providers?required=HW_CPU_X86_AVX", "1.18", note="required")
    add("GET", "/resource_providers?required=CUSTOM_NOPE", "1.18", note="required unknown")
    add("GET", "/resource_providers?required=!HW_CPU_X86_AVX", "1.21", note="forbidden old")
    add("GET", "/resource_providers?required=!HW_CPU_X86_AVX", "1.22", note="forbidden")
    add("GET", "/resource_providers?required=", "1.22", note="required empty")
    add("GET", "/resource_providers?required=in:HW_CPU_X86_AVX,HW_CPU_X86_SSE", "1.38", note="any traits old")
    add("GET", "/resource_providers?required=in:HW_CPU_X86_AVX,HW_CPU_X86_SSE", "1.39", note="any traits")
    add("GET", "/resource_providers?required=HW_CPU_X86_AVX&required=!HW_CPU_X86_SSE", "1.39", note="required multi")

    add("PUT", "/resource_providers/" + RP3, "1.0", body={"name": "rp3-renamed"}, note="rename")
    add("PUT", "/resource_providers/" + RP3, "1.0", body={"name": "rp1"}, note="rename dup")
    add("PUT", "/resource_providers/" + RP3, "1.0", body={}, note="no name")
    add("PUT", "/resource_providers/" + RP3, "1.0", body={"name": ""}, note="empty name")
    add("PUT", "/resource_providers/" + RP3, "1.0", body={"name": "x", "uuid": RP3}, note="uuid in body")
    add("PUT", "/resource_providers/" + RP3, "1.14", body={"name": "rp3", "parent_provider_uuid": RP1}, note="set parent")
    add("PUT", "/resource_providers/" + RP3, "1.14", body={"name": "rp3", "parent_provider_uuid": RP6}, note="reparent 1.14")
    add("PUT", "/resource_providers/" + RP3, "1.14", body={"name": "rp3", "parent_provider_uuid": None}, note="unparent 1.14")
    add("PUT", "/resource_providers/" + RP3, "1.37", body={"name": "rp3", "parent_provider_uuid": RP6}, note="reparent 1.37")
    add("PUT", "/resource_providers/" + RP3, "1.37", body={"name": "rp3", "parent_provider_uuid": RP3}, note="self parent")
    add("PUT", "/resource_providers/" + RP1, "1.37", body={"name": "rp1", "parent_provider_uuid": RP2}, note="loop")
    add("PUT", "/resource_providers/" + RP3, "1.37", body={"name": "rp3", "parent_provider_uuid": U()}, note="unknown parent")
    add("PUT", "/resource_providers/" + RP3, "1.37", body={"name": "rp3", "parent_provider_uuid": None}, note="unparent 1.37")
    add("PUT", "/resource_providers/" + U(), "1.37", body={"name": "zz"}, note="unknown")
    add("PUT", "/resource_providers/" + RP3, "1.39", raw=b"nope", headers=JSON, note="bad json")
    add("PUT", "/resource_providers/" + RP3, "1.39", raw=b'{"name":"a"}', headers={"Content-Type": "text/plain"}, note="bad ctype")
    add("GET", "/resource_providers/" + RP3, "1.39", note="after updates")

    # ---- resource classes -----------------------------------------------
    add("GET", "/resource_classes", "1.1", note="too old")
    add("GET", "/resource_classes", "1.2", note="list")
    add("GET", "/resource_classes/VCPU", "1.2", note="std")
    add("GET", "/resource_classes/CUSTOM_NOPE", "1.2", note="unknown")
    add("POST", "/resource_classes", "1.2", body={"name": "CUSTOM_GOLD"}, note="create")
    add("POST", "/resource_classes", "1.2", body={"name": "CUSTOM_GOLD"}, note="dup")
    add("POST", "/resource_classes", "1.2", body={"name": "GOLD"}, note="no prefix")
    add("POST", "/resource_classes", "1.2", body={"name": "CUSTOM_lower"}, note="lower")
    add("POST", "/resource_classes", "1.2", body={"name": "CUSTOM_" + "A" * 250}, note="long")
    add("POST", "/resource_classes", "1.2", body={}, note="no name")
    add("POST", "/resource_classes", "1.2", body={"name": "VCPU"}, note="std name")
    add("GET", "/resource_classes/CUSTOM_GOLD", "1.2", note="get")
    add("GET", "/resource_classes/CUSTOM_GOLD", "1.15", note="get 1.15")
    add("PUT", "/resource_classes/CUSTOM_GOLD", "1.2", body={"name": "CUSTOM_SILVER"}, note="rename 1.2")
    add("PUT", "/resource_classes/CUSTOM_SILVER", "1.2", body={"name": "CUSTOM_SILVER"}, note="rename same")
    add("PUT", "/resource_classes/VCPU", "1.2", body={"name": "CUSTOM_V"}, note="rename std")
    add("PUT", "/resource_classes/CUSTOM_NONE", "1.2", body={"name": "CUSTOM_V"}, note="rename unknown")
    add("PUT", "/resource_classes/CUSTOM_BRONZE", "1.7", note="ensure 1.7")
    add("PUT", "/resource_classes/CUSTOM_BRONZE", "1.7", note="ensure again")
    add("PUT", "/resource_classes/CUSTOM_BRONZE", "1.7", body={"name": "X"}, note="ensure with body")
    add("PUT", "/resource_classes/VCPU", "1.7", note="ensure std")
    add("PUT", "/resource_classes/BRONZE", "1.7", note="ensure bad")
    add("GET", "/resource_classes", "1.15", note="list 1.15")
    add("DELETE", "/resource_classes/CUSTOM_BRONZE", "1.2", note="delete")
    add("DELETE", "/resource_classes/CUSTOM_BRONZE", "1.2", note="delete again")
    add("DELETE", "/resource_classes/VCPU", "1.2", note="delete std")
    add("PUT", "/resource_classes/CUSTOM_GOLD", "1.7", note="gold")
    add("PUT", "/resource_classes/CUSTOM_SILVER", "1.7", note="silver")

    # ---- traits ----------------------------------------------------------
    add("GET", "/traits", "1.5", note="too old")
    add("GET", "/traits?name=startswith:HW_CPU_X86_AVX5", "1.6", note="startswith")
    add("GET", "/traits?name=in:HW_CPU_X86_AVX,CUSTOM_NOPE", "1.6", note="in")
    add("GET", "/traits?name=foo:bar", "1.6", note="bad filter")
    add("GET", "/traits?associated=true", "1.6", note="associated")
    add("GET", "/traits?associated=maybe", "1.6", note="bad associated")
    add("GET", "/traits?bogus=1", "1.6", note="unknown param")
    add("PUT", "/traits/CUSTOM_T1", "1.6", note="create")
    add("PUT", "/traits/CUSTOM_T1", "1.6", note="again")
    add("PUT", "/traits/CUSTOM_T2", "1.15", note="create 1.15")
    add("PUT", "/traits/HW_CPU_X86_AVX", "1.6", note="std")
    add("PUT", "/traits/NOT_CUSTOM", "1.6", note="no prefix")
    add("PUT", "/traits/CUSTOM_lower", "1.6", note="lower")
    add("GET", "/traits/CUSTOM_T1", "1.6", note="get")
    add("GET", "/traits/CUSTOM_T1", "1.15", note="get 1.15")
    add("GET", "/traits/CUSTOM_NOPE", "1.6", note="unknown")
    add("GET", "/traits/HW_CPU_X86_AVX", "1.6", note="std")
    add("GET", "/traits?name=startswith:CUSTOM", "1.15", note="list customs")
    add("DELETE", "/traits/CUSTOM_T2", "1.6", note="delete")
    add("DELETE", "/traits/CUSTOM_T2", "1.6", note="delete again")
    add("DELETE", "/traits/HW_CPU_X86_AVX", "1.6", note="delete std")
    add("GET", "/resource_providers/%s/traits" % RP1, "1.5", note="too old")
    add("GET", "/resource_providers/%s/traits" % RP1, "1.6", note="empty")
    add("GET", "/resource_providers/%s/traits" % U(), "1.6", note="unknown rp")
    add("PUT", "/resource_providers/%s/traits" % RP1, "1.6", body={"traits": ["CUSTOM_T1", "HW_CPU_X86_AVX"], "resource_provider_generation": 0}, note="set")
    add("PUT", "/resource_providers/%s/traits" % RP1, "1.6", body={"traits": ["CUSTOM_T1"], "resource_provider_generation": 0}, note="stale")
    add("PUT", "/resource_providers/%s/traits" % RP1, "1.23", body={"traits": ["CUSTOM_T1"], "resource_provider_generation": 0}, note="stale 1.23")
    add("PUT", "/resource_providers/%s/traits" % RP1, "1.6", body={"traits": ["CUSTOM_NOPE"], "resource_provider_generation": 1}, note="unknown trait")
    add("PUT", "/resource_providers/%s/traits" % RP1, "1.6", body={"traits": ["CUSTOM_T1"]}, note="no gen")
    add("PUT", "/resource_providers/%s/traits" % RP1, "1.6", body={"traits": "CUSTOM_T1", "resource_provider_generation": 1}, note="not list")
    add("PUT", "/resource_providers/%s/traits" % RP1, "1.6", body={"traits": ["CUSTOM_T1", "CUSTOM_T1"], "resource_provider_generation": 1}, note="dup traits")
    add("PUT", "/resource_providers/%s/traits" % RP1, "1.6", body={"traits": ["bad trait"], "resource_provider_generation": 1}, note="bad pattern")
    add("PUT", "/resource_providers/%s/traits" % U(), "1.6", body={"traits": [], "resource_provider_generation": 0}, note="unknown rp")
    add("GET", "/resource_providers/%s/traits" % RP1, "1.6", note="get")
    add("GET", "/resource_providers/%s/traits" % RP1, "1.15", note="get 1.15")
    add("DELETE", "/traits/CUSTOM_T1", "1.6", note="in use")
    add("GET", "/traits?associated=true", "1.6", note="associated")
    add("GET", "/traits?associated=false&name=startswith:CUSTOM", "1.6", note="not associated")
    add("GET", "/resource_providers?required=CUSTOM_T1", "1.18", note="required")
    add("GET", "/resource_providers?required=!CUSTOM_T1", "1.22", note="forbidden")
    add("GET", "/resource_providers?required=in:CUSTOM_T1,HW_CPU_X86_SSE", "1.39", note="any")
    add("DELETE", "/resource_providers/%s/traits" % RP1, "1.6", note="delete all")
    add("DELETE", "/resource_providers/%s/traits" % RP1, "1.6", note="delete again")
    add("DELETE", "/resource_providers/%s/traits" % U(), "1.6", note="unknown rp")
    add("PUT", "/resource_providers/%s/traits" % RP1, "1.6", body={"traits": ["CUSTOM_T1"], "resource_provider_generation": 3}, note="set again")

    # ---- aggregates ------------------------------------------------------
    add("GET", "/resource_providers/%s/aggregates" % RP1, "1.0", note="too old")
    add("GET", "/resource_providers/%s/aggregates" % RP1, "1.1", note="empty")
    add("GET", "/resource_providers/%s/aggregates" % RP1, "1.19", note="empty 1.19")
    add("PUT", "/resource_providers/%s/aggregates" % RP1, "1.1", body=[AGG1], note="set 1.1")
    add("PUT", "/resource_providers/%s/aggregates" % RP1, "1.1", body=[AGG1, AGG1], note="dup")
    add("PUT", "/resource_providers/%s/aggregates" % RP1, "1.1", body=["bad"], note="bad uuid")
    add("PUT", "/resource_providers/%s/aggregates" % RP1, "1.1", body={"aggregates": [AGG1]}, note="dict old")
    add("PUT", "/resource_providers/%s/aggregates" % RP1, "1.19", body=[AGG1], note="list new")
    add("PUT", "/resource_providers/%s/aggregates" % RP1, "1.19", body={"aggregates": [AGG1, AGG2]}, note="no gen")
    add("PUT", "/resource_providers/%s/aggregates" % RP1, "1.19", body={"aggregates": [AGG1, AGG2], "resource_provider_generation": 0}, note="stale")
    add("PUT", "/resource_providers/%s/aggregates" % RP1, "1.19", body={"aggregates": [AGG1, AGG2], "resource_provider_generation": 4}, note="set")
    add("PUT", "/resource_providers/%s/aggregates" % RP3, "1.19", body={"aggregates": [AGG2], "resource_provider_generation": 2}, note="rp3")
    add("PUT", "/resource_providers/%s/aggregates" % U(), "1.19", body={"aggregates": [], "resource_provider_generation": 0}, note="unknown rp")
    add("GET", "/resource_providers/%s/aggregates" % RP1, "1.1", note="get")
    add("GET", "/resource_providers/%s/aggregates" % RP1, "1.15", note="get 1.15")
    add("GET", "/resource_providers/%s/aggregates" % RP1, "1.19", note="get 1.19")
    add("GET", "/resource_providers/%s/aggregates" % U(), "1.19", note="unknown")
    add("GET", "/resource_providers?member_of=" + AGG1, "1.3", note="member_of")
    add("GET", "/resource_providers?member_of=in:" + AGG1 + "," + AGG2, "1.3", note="member_of in")
    add("GET", "/resource_providers?member_of=" + AGG1 + "&member_of=" + AGG2, "1.24", note="member_of and")
    add("GET", "/resource_providers?member_of=!" + AGG2, "1.32", note="not member")
    add("GET", "/resource_providers/" + RP1, "1.39", note="gen after aggs")

    # ---- inventories -----------------------------------------------------
    INV = "/resource_providers/%s/inventories" % RP1
    add("GET", INV, "1.0", note="empty")
    add("GET", INV, "1.15", note="empty 1.15")
    add("GET", "/resource_providers/%s/inventories" % U(), "1.0", note="unknown rp")
    add("POST", INV, "1.0", body={"resource_class": "VCPU", "total": 8}, note="create")
    add("POST", INV, "1.0", body={"resource_class": "VCPU", "total": 8}, note="dup")
    add("POST", INV, "1.0", body={"resource_class": "CUSTOM_NOPE", "total": 8}, note="unknown rc")
    add("POST", INV, "1.0", body={"resource_class": "MEMORY_MB"}, note="no total")
    add("POST", INV, "1.0", body={"resource_class": "MEMORY_MB", "total": 0}, note="zero total")
    add("POST", INV, "1.0", body={"resource_class": "MEMORY_MB", "total": 100, "reserved": 200}, note="reserved>total")
    add("POST", INV, "1.0", body={"resource_class": "MEMORY_MB", "total": "x"}, note="str total")
    add("POST", INV, "1.0", body={"resource_class": "MEMORY_MB", "total": 1, "foo": 1}, note="extra")
    add("POST", INV, "1.0", body={"resource_class": "MEMORY_MB", "total": 1024, "reserved": 0, "min_unit": 1, "max_unit": 1024, "step_size": 1, "allocation_ratio": 1.5}, note="full")
    add("POST", INV, "1.0", body={"resource_class": "DISK_GB", "total": 100, "min_unit": 0}, note="min_unit 0")
    add("POST", INV, "1.0", body={"resource_class": "DISK_GB", "total": 100, "step_size": 0}, note="step 0")
    add("POST", INV, "1.0", body={"resource_class": "DISK_GB", "total": 100, "max_unit": 0}, note="max 0")
    add("POST", INV, "1.0", body={"resource_class": "DISK_GB", "total": 100, "reserved": 100}, note="reserved=total")
    add("POST", INV, "1.26", body={"resource_class": "DISK_GB", "total": 100, "reserved": 100}, note="reserved=total 1.26")
    add("DELETE", INV + "/DISK_GB", "1.26", note="cleanup")
    add("POST", INV, "1.0", body={"resource_class": "DISK_GB", "total": 2147483648}, note="too big")
    # deliberate differences, on a throw-away provider so that nothing
    # later depends on them
    TMP = U()
    TINV = "/resource_providers/%s/inventories" % TMP
    add("POST", "/resource_providers", "1.20", body={"name": "throwaway", "uuid": TMP}, note="throwaway")
    add("POST", TINV, "1.0", body={"resource_class": "DISK_GB", "total": 100, "min_unit": 50, "max_unit": 10}, note="min>max", expected="metalloc refuses min_unit > max_unit")
    add("POST", TINV, "1.0", body={"resource_class": "VCPU", "total": 100, "allocation_ratio": 0}, note="ratio 0", expected="metalloc refuses allocation_ratio <= 0")
    add("POST", TINV, "1.0", body={"resource_class": "MEMORY_MB", "total": 100, "max_unit": 200}, note="max>total", expected="follows from min>max: Placement accepted that inventory, so its generation is one ahead")
    add("DELETE", "/resource_providers/" + TMP, "1.0", note="throwaway")
    add("POST", INV, "1.0", raw=b"{", headers=JSON, note="bad json")
    add("POST", INV, "1.0", raw=b'{"resource_class":"DISK_GB","total":1}', headers={"Content-Type": "text/plain"}, note="bad ctype")
    add("GET", INV, "1.0", note="list")
    add("GET", INV + "/VCPU", "1.0", note="one")
    add("GET", INV + "/VCPU", "1.15", note="one 1.15")
    add("GET", INV + "/DISK_GB", "1.0", note="missing")
    add("GET", INV + "/CUSTOM_NOPE", "1.0", note="unknown rc")
    add("GET", "/resource_providers/%s/inventories/VCPU" % U(), "1.0", note="unknown rp")
    add("PUT", INV + "/VCPU", "1.0", body={"total": 16, "resource_provider_generation": 999}, note="stale")
    add("PUT", INV + "/VCPU", "1.0", body={"total": 16}, note="no gen")
    add("PUT", INV + "/VCPU", "1.0", body={"total": 16, "resource_provider_generation": 7}, note="update")
    add("PUT", INV + "/VCPU", "1.0", body={"total": 16, "resource_provider_generation": 8, "resource_class": "VCPU"}, note="rc in body")
    add("PUT", INV + "/DISK_GB", "1.0", body={"total": 16, "resource_provider_generation": 8}, note="missing inv")
    add("PUT", INV + "/CUSTOM_NOPE", "1.0", body={"total": 16, "resource_provider_generation": 8}, note="unknown rc")
    add("PUT", INV + "/VCPU", "1.0", body={"total": 0, "resource_provider_generation": 8}, note="zero total")
    add("PUT", INV, "1.0", body={"resource_provider_generation": 8, "inventories": {"VCPU": {"total": 32}, "CUSTOM_GOLD": {"total": 5, "max_unit": 5}}}, note="set all")
    add("PUT", INV, "1.0", body={"resource_provider_generation": 8, "inventories": {}}, note="set stale")
    add("PUT", INV, "1.0", body={"inventories": {}}, note="set no gen")
    add("PUT", INV, "1.0", body={"resource_provider_generation": 9, "inventories": {"CUSTOM_NOPE": {"total": 1}}}, note="set unknown rc")
    add("PUT", INV, "1.0", body={"resource_provider_generation": 9, "inventories": {"VCPU": {}}}, note="set no total")
    add("PUT", INV, "1.0", body={"resource_provider_generation": 9, "inventories": {"VCPU": {"total": 1, "bogus": 1}}}, note="set extra")
    add("PUT", INV, "1.0", body={"resource_provider_generation": 9, "inventories": {"VCPU": {"total": 32, "reserved": 40}}}, note="set reserved")
    add("PUT", INV, "1.0", body={"resource_provider_generation": 9, "inventories": {"VCPU": {"total": 32, "resource_class": "VCPU"}}}, note="set rc in inv")
    add("PUT", "/resource_providers/%s/inventories" % U(), "1.0", body={"resource_provider_generation": 0, "inventories": {}}, note="set unknown rp")
    add("GET", INV, "1.0", note="after set")
    add("DELETE", INV, "1.4", note="delete all old")
    add("PUT", "/resource_providers/%s/inventories" % RP6, "1.0", body={"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 4}}}, note="rp6 inv")
    add("DELETE", "/resource_providers/%s/inventories" % RP6, "1.5", note="delete all")
    add("DELETE", "/resource_providers/%s/inventories" % RP6, "1.5", note="delete all again")
    add("DELETE", "/resource_providers/%s/inventories" % U(), "1.5", note="delete all unknown")
    add("GET", "/resource_providers/%s/inventories" % RP6, "1.5", note="after delete")
    add("DELETE", INV + "/DISK_GB", "1.0", note="delete missing")
    add("DELETE", INV + "/CUSTOM_NOPE", "1.0", note="delete unknown rc")
    add("PUT", "/resource_providers/%s/inventories" % RP2, "1.0", body={"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 4}, "MEMORY_MB": {"total": 2048, "reserved": 512, "allocation_ratio": 1.0, "step_size": 256}}}, note="rp2 inv")
    add("PUT", "/resource_providers/%s/inventories" % RP3, "1.0", body={"resource_provider_generation": "@gen:" + RP3, "inventories": {"DISK_GB": {"total": 1000, "max_unit": 500}}}, note="rp3 inv")
    add("GET", "/resource_providers?resources=VCPU:4", "1.4", note="resources")
    add("GET", "/resource_providers?resources=VCPU:4,MEMORY_MB:1024", "1.4", note="resources 2")
    add("GET", "/resource_providers?resources=VCPU:100", "1.4", note="resources too much")
    add("GET", "/resource_providers?resources=CUSTOM_GOLD:1&in_tree=" + RP2, "1.14", note="res+tree")

    # ---- allocations -----------------------------------------------------
    A = "/allocations/"
    add("GET", A + C1, "1.0", note="empty")
    add("GET", A + C1, "1.12", note="empty 1.12")
    add("GET", A + C1, "1.28", note="empty 1.28")
    add("GET", A + C1, "1.38", note="empty 1.38")
    add("GET", A + "not-a-uuid", "1.0", note="bad consumer")
    list_body = {"allocations": [{"resource_provider": {"uuid": RP1}, "resources": {"VCPU": 2, "MEMORY_MB": 256}}]}
    add("PUT", A + C1, "1.0", body=list_body, note="list 1.0")
    add("GET", A + C1, "1.0", note="get 1.0")
    add("PUT", A + C1, "1.7", body={"allocations": list_body["allocations"], "project_id": P1, "user_id": US1}, note="list 1.7")
    add("PUT", A + C2, "1.8", body=list_body, note="no project 1.8")
    add("PUT", A + C2, "1.8", body=dict(list_body, project_id=P1, user_id=US1), note="list 1.8")
    add("PUT", A + C2, "1.12", body=dict(list_body, project_id=P1, user_id=US1), note="list at 1.12")
    dict_body = {"allocations": {RP1: {"resources": {"VCPU": 1}}}, "project_id": P1, "user_id": US1}
    add("PUT", A + C3, "1.11", body=dict_body, note="dict at 1.11")
    add("PUT", A + C3, "1.12", body=dict_body, note="dict 1.12")
    add("GET", A + C3, "1.12", note="get 1.12")
    add("GET", A + C3, "1.15", note="get 1.15")
    add("GET", A + C3, "1.28", note="get 1.28")
    add("GET", A + C3, "1.38", note="get 1.38")
    add("PUT", A + C3, "1.12", body={"allocations": {RP1: {"resources": {"VCPU": 1}, "generation": 0}}, "project_id": P1, "user_id": US1}, note="dict with gen")
    add("PUT", A + C4, "1.28", body=dict_body, note="no consumer gen")
    add("PUT", A + C4, "1.28", body=dict(dict_body, consumer_generation=None), note="new consumer")
    add("PUT", A + C4, "1.28", body=dict(dict_body, consumer_generation=None), note="null gen existing")
    add("PUT", A + C4, "1.28", body=dict(dict_body, consumer_generation=5), note="bad gen")
    add("PUT", A + C4, "1.28", body=dict(dict_body, consumer_generation=1), note="update gen")
    add("GET", A + C4, "1.28", note="get gen")
    add("PUT", A + C5, "1.28", body=dict(dict_body, consumer_generation=3), note="gen for new")
    add("PUT", A + C5, "1.37", body=dict(dict_body, consumer_generation=None, consumer_type="INSTANCE"), note="type at 1.37")
    add("PUT", A + C5, "1.38", body=dict(dict_body, consumer_generation=None), note="no type 1.38")
    add("PUT", A + C5, "1.38", body=dict(dict_body, consumer_generation=None, consumer_type="INSTANCE"), note="type 1.38")
    add("PUT", A + C5, "1.38", body=dict(dict_body, consumer_generation=1, consumer_type="bad type"), note="bad type")
    add("PUT", A + C5, "1.38", body=dict(dict_body, consumer_generation=1, consumer_type="MIGRATION"), note="change type")
    add("GET", A + C5, "1.38", note="get type")
    add("GET", A + C5, "1.37", note="get 1.37")
    add("PUT", A + C6, "1.12", body={"allocations": {RP1: {"resources": {"VCPU": 1000}}}, "project_id": P1, "user_id": US1}, note="capacity")
    add("PUT", A + C6, "1.23", body={"allocations": {RP1: {"resources": {"VCPU": 1000}}}, "project_id": P1, "user_id": US1}, note="capacity 1.23")
    add("PUT", A + C6, "1.12", body={"allocations": {RP1: {"resources": {"DISK_GB": 1}}}, "project_id": P1, "user_id": US1}, note="no inventory")
    add("PUT", A + C6, "1.12", body={"allocations": {RP1: {"resources": {"CUSTOM_NOPE": 1}}}, "project_id": P1, "user_id": US1}, note="unknown rc")
    add("PUT", A + C6, "1.12", body={"allocations": {U(): {"resources": {"VCPU": 1}}}, "project_id": P1, "user_id": US1}, note="unknown rp")
    add("PUT", A + C6, "1.12", body={"allocations": {RP1: {"resources": {"VCPU": 0}}}, "project_id": P1, "user_id": US1}, note="zero")
    add("PUT", A + C6, "1.12", body={"allocations": {RP1: {"resources": {}}}, "project_id": P1, "user_id": US1}, note="empty resources")
    add("PUT", A + C6, "1.12", body={"allocations": {}, "project_id": P1, "user_id": US1}, note="empty allocs")
    add("PUT", A + C6, "1.12", body={"allocations": {RP2: {"resources": {"MEMORY_MB": 100}}}, "project_id": P1, "user_id": US1}, note="step violation")
    add("PUT", A + C6, "1.12", body={"allocations": {RP3: {"resources": {"DISK_GB": 600}}}, "project_id": P1, "user_id": US1}, note="max_unit violation")
    add("PUT", A + C6, "1.12", body={"allocations": {"bad": {"resources": {"VCPU": 1}}}, "project_id": P1, "user_id": US1}, note="bad rp key")
    add("PUT", A + C6, "1.12", body={"allocations": {RP1: {"resources": {"VCPU": 1}}}, "project_id": "", "user_id": US1}, note="empty project")
    add("PUT", A + C6, "1.12", raw=b"[", headers=JSON, note="bad json")
    add("PUT", A + C6, "1.12", raw=b"{}", headers={"Content-Type": "text/plain"}, note="bad ctype")
    add("PUT", A + C6, "1.12", body={"allocations": [], "project_id": P1, "user_id": US1}, note="list at dict")
    add("PUT", A + C6, "1.0", body={"allocations": []}, note="empty list 1.0")
    add("PUT", A + "notauuid", "1.12", body=dict_body, note="bad consumer")
    C7 = U()
    add("PUT", A + C7, "1.28", body={"allocations": {RP2: {"resources": {"VCPU": 1}}, RP3: {"resources": {"DISK_GB": 100}}}, "project_id": P1, "user_id": US1, "consumer_generation": None}, note="multi rp")
    add("GET", A + C7, "1.28", note="get multi")
    add("PUT", A + C7, "1.28", body={"allocations": {RP2: {"resources": {"VCPU": 2}}}, "project_id": P1, "user_id": US1, "consumer_generation": 1}, note="move off rp3")
    add("GET", "/resource_providers/" + RP3, "1.28", note="rp3 gen after move")
    add("GET", "/resource_providers/" + RP2, "1.28", note="rp2 gen after move")
    add("PUT", A + C7, "1.28", body={"allocations": {}, "project_id": P1, "user_id": US1, "consumer_generation": 2}, note="empty = delete 1.28")
    add("GET", A + C7, "1.28", note="after empty")
    add("GET", "/resource_providers/" + RP2, "1.28", note="rp2 gen after empty")
    add("GET", "/resource_providers/%s/usages" % RP3, "1.0", note="rp3 usages")
    add("GET", "/resource_providers/%s/allocations" % RP1, "1.0", note="rp allocs")
    add("GET", "/resource_providers/%s/allocations" % RP1, "1.15", note="rp allocs 1.15")
    add("GET", "/resource_providers/%s/allocations" % U(), "1.0", note="rp allocs unknown")
    add("GET", "/resource_providers/" + RP1, "1.11", note="links 1.11")
    add("GET", "/resource_providers/" + RP1, "1.10", note="links 1.10")

    add("GET", "/resource_providers/" + RP1, "1.14", note="checkpoint")
    add("GET", "/resource_providers/" + RP1, "1.14", note="checkpoint")
    # POST /allocations
    add("POST", "/allocations", "1.12", body={}, note="too old")
    post_ok = {C1: {"allocations": {RP1: {"resources": {"VCPU": 1}}}, "project_id": P1, "user_id": US1}}
    add("POST", "/allocations", "1.13", body=post_ok, note="move 1.13")
    add("POST", "/allocations", "1.28", body=post_ok, note="no gen 1.28")
    add("POST", "/allocations", "1.28", body={C1: dict(post_ok[C1], consumer_generation=99)}, note="bad gen 1.28")
    add("GET", A + C1, "1.28", note="c1 gen")
    add("POST", "/allocations", "1.28", body={C1: dict(post_ok[C1], consumer_generation=2), C2: {"allocations": {}, "project_id": P1, "user_id": US1, "consumer_generation": 1}}, note="swap")
    add("POST", "/allocations", "1.38", body={C1: dict(post_ok[C1], consumer_generation=3)}, note="no type 1.38")
    add("POST", "/allocations", "1.38", body={C1: dict(post_ok[C1], consumer_generation=3, consumer_type="INSTANCE")}, note="type 1.38")
    add("POST", "/allocations", "1.13", body={C1: {"allocations": {RP1: {"resources": {"VCPU": 1000}}}, "project_id": P1, "user_id": US1}}, note="capacity")
    add("POST", "/allocations", "1.13", body={"bad": {"allocations": {}, "project_id": P1, "user_id": US1}}, note="bad key")
    add("POST", "/allocations", "1.13", body={C1: {"allocations": {}}}, note="missing project")
    add("POST", "/allocations", "1.13", body=[], note="array")
    add("POST", "/allocations", "1.13", raw=b"{x", headers=JSON, note="bad json")
    add("POST", "/allocations", "1.13", body={C2: {"allocations": {U(): {"resources": {"VCPU": 1}}}, "project_id": P1, "user_id": US1}}, note="unknown rp")

    add("GET", "/resource_providers/" + RP1, "1.14", note="checkpoint")
    # ---- usages ----------------------------------------------------------
    add("GET", "/resource_providers/%s/usages" % RP1, "1.0", note="rp usages")
    add("GET", "/resource_providers/%s/usages" % RP1, "1.15", note="rp usages 1.15")
    add("GET", "/resource_providers/%s/usages" % RP6, "1.0", note="no inv")
    add("GET", "/resource_providers/%s/usages" % U(), "1.0", note="unknown")
    add("GET", "/usages?project_id=" + P1, "1.8", note="too old")
    add("GET", "/usages?project_id=" + P1, "1.9", note="project")
    add("GET", "/usages?project_id=" + P1 + "&user_id=" + US1, "1.9", note="project+user")
    add("GET", "/usages", "1.9", note="no project")
    add("GET", "/usages?user_id=" + US1, "1.9", note="user only")
    add("GET", "/usages?project_id=" + P1 + "&bogus=1", "1.9", note="unknown param")
    add("GET", "/usages?project_id=" + P1, "1.15", note="1.15")
    PGBUG = "Placement 8.0 on PostgreSQL answers 500 (GroupingError in its usage query)"
    add("GET", "/usages?project_id=" + P1, "1.38", note="1.38 types", expected=PGBUG)
    add("GET", "/usages?project_id=" + P1 + "&consumer_type=INSTANCE", "1.38", note="type filter", expected=PGBUG)
    add("GET", "/usages?project_id=" + P1 + "&consumer_type=all", "1.38", note="type all")
    add("GET", "/usages?project_id=" + P1 + "&consumer_type=unknown", "1.38", note="type unknown")
    add("GET", "/usages?project_id=" + P1 + "&consumer_type=bad!", "1.38", note="type bad")
    add("GET", "/usages?project_id=" + P1 + "&consumer_type=INSTANCE", "1.37", note="type old")
    add("GET", "/usages?project_id=" + U(), "1.9", note="unknown project")

    # ---- inventory in use / deletes -------------------------------------
    add("DELETE", INV + "/VCPU", "1.0", note="in use")
    add("DELETE", INV + "/VCPU", "1.23", note="in use 1.23")
    add("DELETE", INV, "1.5", note="all in use")
    add("PUT", INV, "1.23", body={"resource_provider_generation": 12, "inventories": {"MEMORY_MB": {"total": 1024}}}, note="set removing used")
    add("DELETE", "/resource_providers/" + RP1, "1.0", note="has allocs / children")
    add("DELETE", "/resource_providers/" + RP1, "1.23", note="has allocs 1.23")
    add("DELETE", "/resource_providers/" + RP3, "1.23", note="rp3 allocs")
    add("DELETE", "/resource_providers/" + U(), "1.0", note="unknown")
    add("DELETE", "/resource_providers/notauuid", "1.0", note="not uuid")
    add("DELETE", A + C1, "1.0", note="delete allocs")
    add("DELETE", A + C1, "1.0", note="delete again")
    add("DELETE", A + "notauuid", "1.0", note="bad consumer")

    add("GET", "/resource_providers/" + RP1, "1.14", note="checkpoint")
    # ---- reshaper --------------------------------------------------------
    C2 = U()
    add("POST", "/reshaper", "1.29", body={}, note="too old")
    add("POST", "/reshaper", "1.30", body={}, note="empty")
    add("GET", "/resource_providers/" + RP6, "1.30", note="rp6 gen")
    reshape = {
        "inventories": {RP6: {"resource_provider_generation": "@gen:" + RP6, "inventories": {"VCPU": {"total": 8}}}},
        "allocations": {C2: {"allocations": {RP6: {"resources": {"VCPU": 2}}}, "project_id": P1, "user_id": US1, "consumer_generation": None}},
    }
    add("POST", "/reshaper", "1.30", body=reshape, note="ok")
    add("POST", "/reshaper", "1.30", body=dict(reshape, inventories={RP6: {"resource_provider_generation": 2, "inventories": {"VCPU": {"total": 8}}}}), note="stale")
    add("POST", "/reshaper", "1.30", body={"inventories": {}, "allocations": {}}, note="nothing")
    add("POST", "/reshaper", "1.30", body={"inventories": {U(): {"resource_provider_generation": 0, "inventories": {}}}, "allocations": {}}, note="unknown rp")
    add("POST", "/reshaper", "1.30", body={"inventories": {RP6: {"resource_provider_generation": "@gen:" + RP6, "inventories": {"VCPU": {"total": 1}}}}, "allocations": {}}, note="shrink", expected="metalloc refuses inventory below usage")
    add("POST", "/reshaper", "1.38", body={"inventories": {}, "allocations": {C3: {"allocations": {}, "project_id": P1, "user_id": US1, "consumer_generation": 1}}}, note="no type 1.38")
    add("POST", "/reshaper", "1.30", raw=b"x", headers=JSON, note="bad json")
    add("GET", A + C2, "1.38", note="after reshape")
    add("GET", "/resource_providers/%s/usages" % RP6, "1.30", note="rp6 usages")

    # ---- deletes / cleanup ----------------------------------------------
    add("GET", "/resource_providers/" + RP1, "1.14", note="checkpoint")
    add("DELETE", "/resource_providers/" + RP2, "1.0", note="child with allocs? ")
    add("DELETE", "/traits/CUSTOM_T1", "1.6", note="still in use")
    add("DELETE", "/resource_classes/CUSTOM_GOLD", "1.2", note="rc in use")
    add("DELETE", "/resource_providers/%s/traits" % RP1, "1.6", note="clear traits")
    add("DELETE", "/traits/CUSTOM_T1", "1.6", note="now free")
    add("GET", "/resource_providers", "1.39", note="final list")
    add("GET", "/resource_providers", "1.15", note="final list 1.15")
    # Placement keeps the consumer a failed write created (<1.28), which a
    # later write with consumer_generation null then trips over
    CL = U()
    add("POST", "/allocations", "1.13", body={CL: {"allocations": {U(): {"resources": {"VCPU": 1}}}, "project_id": P1, "user_id": US1}}, note="failed write")
    add("PUT", "/allocations/" + CL, "1.28", body={"allocations": {RP1: {"resources": {"VCPU": 1}}}, "project_id": P1, "user_id": US1, "consumer_generation": None}, note="after failed write",
        expected="Placement leaves behind the consumer a failed allocation write created; metalloc rolls it back")
    add("DELETE", "/allocations/" + CL, "1.28", note="cleanup", expected="follows from the previous")
    # inventory below usage: deliberate difference, on a throw-away provider
    SHRINK = "metalloc refuses inventory below current usage (409 placement.inventory.inuse)"
    TMP2, CS = U(), U()
    TI = "/resource_providers/%s/inventories" % TMP2
    add("POST", "/resource_providers", "1.20", body={"name": "throwaway2", "uuid": TMP2}, note="throwaway")
    add("PUT", TI, "1.23", body={"resource_provider_generation": 0, "inventories": {"VCPU": {"total": 4}, "DISK_GB": {"total": 10}}}, note="inv")
    add("PUT", "/allocations/" + CS, "1.28", body={"allocations": {TMP2: {"resources": {"VCPU": 3, "DISK_GB": 5}}}, "project_id": P1, "user_id": US1, "consumer_generation": None}, note="use")
    add("PUT", TI + "/VCPU", "1.23", body={"resource_provider_generation": "@gen:" + TMP2, "total": 1}, note="shrink below usage", expected=SHRINK)
    add("PUT", TI, "1.23", body={"resource_provider_generation": "@gen:" + TMP2, "inventories": {"VCPU": {"total": 4, "reserved": 3}, "DISK_GB": {"total": 10}}}, note="reserve below usage", expected=SHRINK)
    add("POST", "/reshaper", "1.30", body={"inventories": {TMP2: {"resource_provider_generation": "@gen:" + TMP2, "inventories": {"VCPU": {"total": 4}, "DISK_GB": {"total": 2}}}}, "allocations": {}}, note="reshape below usage")
    add("DELETE", "/allocations/" + CS, "1.28", note="cleanup")
    add("DELETE", "/resource_providers/" + TMP2, "1.28", note="cleanup")
    return S


HDRS = ("openstack-api-version", "vary", "location", "last-modified",
        "cache-control", "content-type", "allow")


def send(base, step):
    data = None
    headers = {}
    if step.token is not None:
        headers["X-Auth-Token"] = step.token
    if step.ver is not None:
        headers["OpenStack-API-Version"] = "placement " + step.ver
    if step.body is not None:
        text = json.dumps(step.body)
        # "@gen:<rp uuid>" stands for that provider's current generation on
        # this server (read with an extra, uncompared GET).
        for u in set(re.findall(r'"@gen:([0-9a-f-]{36})"', text)):
            text = text.replace('"@gen:%s"' % u, str(current_generation(base, u)))
        data = text.encode()
        headers["Content-Type"] = "application/json"
    elif step.raw is not None:
        data = step.raw
    headers.update(step.headers)
    if headers.get("Content-Type") == "":
        del headers["Content-Type"]
    req = urllib.request.Request(base + step.path, data=data, method=step.method)
    for k, v in headers.items():
        req.add_header(k, v)
    if data is not None and "Content-Type" not in headers:
        # urllib adds a form content type by default; send none at all
        req.remove_header("Content-type")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            status, hdrs, body = r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        status, hdrs, body = e.code, e.headers, e.read()
    h = {}
    for k in HDRS:
        vals = hdrs.get_all(k) or []
        if vals:
            h[k] = ", ".join(vals)
    return status, h, body


def current_generation(base, rp):
    req = urllib.request.Request(base + "/resource_providers/" + rp)
    req.add_header("X-Auth-Token", "admin")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())["generation"]
    except urllib.error.HTTPError:
        return 0


class Norm:
    """Normalises one server's responses: uuids the script made are kept,
    the server's own become <uuid-N> in order of first appearance."""

    def __init__(self, known):
        self.known = known
        self.map = {}

    def s(self, v):
        v = REQID_RE.sub("<reqid>", v)
        v = TS_RE.sub("<ts>", v)

        def sub(m):
            u = m.group(0).lower()
            try:
                u = str(uuidlib.UUID(u))
            except ValueError:
                return m.group(0)
            if u in self.known:
                return self.known[u]
            if u not in self.map:
                self.map[u] = "<uuid-%d>" % (len(self.map) + 1)
            return self.map[u]
        return UUID_RE.sub(sub, v)

    def j(self, v):
        if isinstance(v, dict):
            return {self.s(k): self.j(x) for k, x in v.items()}
        if isinstance(v, list):
            return sorted((self.j(x) for x in v), key=lambda x: json.dumps(x, sort_keys=True))
        if isinstance(v, str):
            return self.s(v)
        return v


def norm_headers(n, h):
    out = {}
    for k, v in h.items():
        if k == "last-modified":
            v = "<present>"
        elif k == "location":
            v = n.s(re.sub(r"^https?://[^/]+", "", v))
        elif k == "allow":
            v = ", ".join(sorted(x.strip().upper() for x in v.split(",")))
        elif k == "vary":
            v = ", ".join(sorted(x.strip().lower() for x in v.split(",")))
        elif k == "content-type":
            v = v.replace(" ", "").lower()
        out[k] = v
    return out


def parse_body(b):
    if not b:
        return None
    try:
        return json.loads(b)
    except ValueError:
        return {"<non-json>": b.decode("utf-8", "replace")[:200]}


def shape(v):
    if isinstance(v, dict):
        return {k: shape(x) for k, x in v.items()}
    if isinstance(v, list):
        return [shape(x) for x in v[:1]]
    return type(v).__name__


def compare_bodies(a, b):
    """Returns (hard differences, soft differences) as text lists."""
    hard, soft = [], []
    if isinstance(a, dict) and isinstance(b, dict) and "errors" in a and "errors" in b:
        ea, eb = a["errors"], b["errors"]
        if len(ea) != len(eb):
            hard.append("error count %d vs %d" % (len(ea), len(eb)))
            return hard, soft
        for x, y in zip(ea, eb):
            for k in sorted(set(x) | set(y)):
                if k == "request_id":
                    if (k in x) != (k in y):
                        hard.append("error key %s presence" % k)
                    continue
                if k == "detail":
                    dx = re.sub(r"\s+", " ", str(x.get(k, ""))).strip()
                    dy = re.sub(r"\s+", " ", str(y.get(k, ""))).strip()
                    if dx != dy:
                        soft.append("detail: %r vs %r" % (dx[:300], dy[:300]))
                    continue
                if x.get(k, "<absent>") != y.get(k, "<absent>"):
                    hard.append("error %s: %r vs %r" % (k, x.get(k, "<absent>"), y.get(k, "<absent>")))
        return hard, soft
    if (isinstance(a, dict) and isinstance(b, dict) and list(a) == ["<non-json>"]
            and list(b) == ["<non-json>"]):
        if a != b:
            soft.append("text: %r vs %r" % (a["<non-json>"], b["<non-json>"]))
        return hard, soft
    if a != b:
        if shape(a) != shape(b) and not (isinstance(a, dict) and isinstance(b, dict)):
            hard.append("body: %s\n        vs %s" % (json.dumps(a, sort_keys=True)[:600],
                                                   json.dumps(b, sort_keys=True)[:600]))
        else:
            diff_paths("$", a, b, hard)
    return hard, soft


def diff_paths(path, a, b, out):
    """Appends the differing JSON paths between a and b to out."""
    if len(out) > 12:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a:
                out.append("%s.%s only in B: %s" % (path, k, json.dumps(b[k])[:200]))
            elif k not in b:
                out.append("%s.%s only in A: %s" % (path, k, json.dumps(a[k])[:200]))
            elif k == "message" and path == "$":
                continue  # webob-style error text
            else:
                diff_paths("%s.%s" % (path, k), a[k], b[k], out)
        return
    if isinstance(a, list) and isinstance(b, list):
        key = None
        if all(isinstance(x, dict) and "uuid" in x for x in a + b):
            key = "uuid"
        if key:
            ma = {x[key]: x for x in a}
            mb = {x[key]: x for x in b}
            for k in sorted(set(ma) | set(mb)):
                if k not in ma:
                    out.append("%s[%s] only in B" % (path, k))
                elif k not in mb:
                    out.append("%s[%s] only in A" % (path, k))
                else:
                    diff_paths("%s[%s]" % (path, k), ma[k], mb[k], out)
            return
        if len(a) != len(b):
            out.append("%s: %s vs %s" % (path, json.dumps(a)[:300], json.dumps(b)[:300]))
            return
        for i, (x, y) in enumerate(zip(a, b)):
            diff_paths("%s[%d]" % (path, i), x, y, out)
        return
    if a != b or type(a) != type(b):
        out.append("%s: %s vs %s" % (path, json.dumps(a)[:300], json.dumps(b)[:300]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", default="http://127.0.0.1:8778", help="reference Placement")
    ap.add_argument("--b", default="http://127.0.0.1:18778", help="metalloc-placement")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--strict-detail", action="store_true")
    ap.add_argument("--only", default="", help="report only steps whose label contains this")
    ap.add_argument("--trace", action="store_true", help="print both statuses and bodies of every step")
    args = ap.parse_args()

    steps = build_steps()
    known = {}
    # uuids the script chose are stable names on both sides
    for st in steps:
        for m in UUID_RE.finditer(st.path + json.dumps(st.body) if st.body is not None else st.path):
            u = str(uuidlib.UUID(m.group(0)))
            known.setdefault(u, "<u%d>" % (len(known) + 1))
    na, nb = Norm(known), Norm(known)
    ndiff = nsoft = nexp = 0
    for i, st in enumerate(steps):
        sa, ha, ba = send(args.a, st)
        sb, hb, bb = send(args.b, st)
        ha, hb = norm_headers(na, ha), norm_headers(nb, hb)
        ja, jb = na.j(parse_body(ba)), nb.j(parse_body(bb))
        hard, soft = [], []
        if sa != sb:
            hard.append("status %d vs %d" % (sa, sb))
        for k in HDRS:
            if ha.get(k) != hb.get(k):
                hard.append("header %s: %r vs %r" % (k, ha.get(k), hb.get(k)))
        h2, s2 = compare_bodies(ja, jb)
        hard += h2
        soft += s2
        if args.strict_detail:
            hard, soft = hard + soft, []
        if args.only and args.only not in st.label():
            continue
        if args.trace:
            print("[%3d] %d/%d %s\n   A %s\n   B %s" % (i, sa, sb, st.label(),
                  json.dumps(ja, sort_keys=True)[:300], json.dumps(jb, sort_keys=True)[:300]))
        if hard and st.expected:
            nexp += 1
            tag = "EXPECTED (%s)" % st.expected
        elif hard:
            ndiff += 1
            tag = "DIFF"
        elif soft:
            nsoft += 1
            tag = "soft"
        else:
            tag = "ok"
        if tag != "ok" and (tag == "DIFF" or args.verbose):
            print("[%3d] %s %s" % (i, tag, st.label()))
            for d in hard + soft:
                print("      " + d)
        elif args.verbose:
            print("[%3d] ok %s" % (i, st.label()))
    print("SUMMARY: %d requests compared, %d differ, %d expected (deliberate), %d detail-only (soft)"
          % (len(steps), ndiff, nexp, nsoft))
    return 1 if ndiff else 0


if __name__ == "__main__":
    sys.exit(main())
