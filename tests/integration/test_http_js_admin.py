"""The JavaScript SDK's ServiceBusAdministrationClient (@azure/service-bus) against a real
daemon, on the connection string's port (HTTPS, trusting the generated certificate via
NODE_EXTRA_CA_CERTS). The program is tests/js/sb_admin.mjs; its npm dependencies are
installed once into a cache directory (skipped when node/npm or the registry are missing)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.integration.amqp_sdk import cli_json, connection_string

JS_DIR = Path(__file__).resolve().parents[1] / "js"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sbctl-tests" / "js"


def js_project() -> Path:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed for the JavaScript SDK test")
    CACHE.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "sb_admin.mjs"):
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


def test_the_javascript_admin_client_creates_lists_updates_and_deletes(daemon: Any) -> None:
    project = js_project()
    cert = cli_json(daemon, "daemon", "cert")["certificate"]
    run = subprocess.run(
        ["node", "sb_admin.mjs", connection_string(daemon)],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NODE_EXTRA_CA_CERTS": cert},
    )
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen == {
        "created": ["js-orders", 4, "PT30S"],
        "updated": 6,
        "exists": [True, False],
        "queues": ["js-orders"],
        "topics": ["js-events"],
        "subscriptions": ["js-all"],
        "rules": ["$Default", "js-sql", "js-corr"],
        "sqlRule": "n > 1",
        "runtime": 0,
        "namespace": "sbemulatorns",
        "conflict": "MessageEntityAlreadyExistsError",
        "after": [],
    }
    assert cli_json(daemon, "queue", "list") == []
