# A pytest plugin (pytest -p osc_placement_live, with this directory on
# PYTHONPATH) for osc-placement's functional tests as Debian's
# python3-osc-placement ships them: each test normally starts a Placement
# in-process; this points it at the one already running instead, and
# empties that one first, since each upstream test starts on a fresh
# database (e2e TestOSCPlacementSuite).
#   PLACEMENT_URL    the running Placement, e.g. http://127.0.0.1:8778
#   PLACEMENT_TOKEN  a noauth2 token with the admin role (default: admin)
#   RESET_CMD        a shell command that leaves the Placement empty
import os
import subprocess

import fixtures
from placement.tests.functional.fixtures import placement as upstream


class LivePlacement(fixtures.Fixture):
    """What the tests read of upstream's PlacementFixture: endpoint, token."""

    def __init__(self, *args, **kwargs):
        super().__init__()
        self.endpoint = os.environ["PLACEMENT_URL"]
        self.token = os.environ.get("PLACEMENT_TOKEN", "admin")

    def _setUp(self):
        reset = os.environ.get("RESET_CMD")
        if reset:
            subprocess.run(reset, shell=True, check=True)


upstream.PlacementFixture = LivePlacement
