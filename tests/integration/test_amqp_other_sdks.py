"""Other AMQP stacks against a real daemon: the JavaScript SDK (@azure/service-bus on
rhea). The program lives in tests/js/; its npm dependencies are installed once into a
cache directory (skipped when node/npm or the registry are not available)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.integration.amqp_sdk import connection_string

JS_DIR = Path(__file__).resolve().parents[1] / "js"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sbctl-tests" / "js"


def js_project() -> Path:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed for the JavaScript SDK test")
    CACHE.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "sb_smoke.mjs"):
        shutil.copy(JS_DIR / name, CACHE / name)
    if not (CACHE / "node_modules" / "@azure" / "service-bus").exists():
        done = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund"],
            cwd=CACHE,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if done.returncode != 0:
            pytest.skip(f"npm install failed (offline?): {done.stderr.strip()[-300:]}")
    return CACHE


def test_the_javascript_sdk_sends_receives_settles_peeks_and_uses_sessions(daemon: Any) -> None:
    project = js_project()
    daemon.cli("queue", "create", "jsq", check=True)
    daemon.cli("queue", "create", "jssq", "--enable-session", check=True)
    run = subprocess.run(
        ["node", "sb_smoke.mjs", connection_string(daemon), "jsq", "jssq"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen == {
        "scheduled": True,
        "peek": ["js-1", "js-2", "js-3", "later"],
        "received": ["js-1", "js-2", "js-3"],
        "props": {"n": 5, "s": "x"},
        "again": [["js-1", 1]],
        "dead": [["js-2", "bad"]],
        "sessionId": "S1",
        "state": "st",
        "sessionMessages": ["s-1"],
    }
    assert daemon.cli("-o", "json", "queue", "show", "jsq").json()["total_message_count"] == 0
