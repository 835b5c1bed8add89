"""Other AMQP stacks against a real daemon: the JavaScript SDK (@azure/service-bus on
rhea) and the Java SDK (azure-messaging-servicebus on proton-j: MSSBCBS-style SASL, one
shared connection, the transaction coordinator). The programs live in tests/js/ and
tests/java/; their dependencies are fetched once into a cache directory (the test is
skipped when node/npm or maven/javac or the registries are not available)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.integration.amqp_sdk import collect_sdk_sockets, connection_string  # noqa: F401

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


JAVA_DIR = Path(__file__).resolve().parents[1] / "java"
JAVA_CACHE = CACHE.parent / "java"


def java_program() -> list[str]:
    """Resolve the SDK into a private Maven repository, compile, return the java command."""
    for tool in ("mvn", "javac", "java"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is needed for the Java SDK test")
    JAVA_CACHE.mkdir(parents=True, exist_ok=True)
    shutil.copy(JAVA_DIR / "pom.xml", JAVA_CACHE / "pom.xml")
    classpath = JAVA_CACHE / "cp.txt"
    if not classpath.exists():
        done = subprocess.run(
            ["mvn", "-q", "-B", f"-Dmaven.repo.local={JAVA_CACHE / 'm2'}",
             "dependency:build-classpath", f"-Dmdep.outputFile={classpath}"],
            cwd=JAVA_CACHE, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        if done.returncode != 0:
            classpath.unlink(missing_ok=True)
            pytest.skip(f"maven could not resolve the SDK (offline?): {done.stdout[-300:]}")
    classes = JAVA_CACHE / "classes"
    source = JAVA_DIR / "src" / "main" / "java" / "smoke" / "Main.java"
    compiled = subprocess.run(
        ["javac", "-cp", classpath.read_text().strip(), "-d", str(classes), str(source)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert compiled.returncode == 0, compiled.stderr
    return ["java", "-cp", f"{classes}:{classpath.read_text().strip()}", "smoke.Main"]


def test_the_java_sdk_sends_receives_settles_peeks_uses_sessions_and_transactions(
    daemon: Any,
) -> None:
    command = java_program()
    daemon.cli("queue", "create", "jq", check=True)
    daemon.cli("queue", "create", "jsq", "--enable-session", check=True)
    run = subprocess.run(
        [*command, connection_string(daemon), "jq", "jsq"],
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip().splitlines()[-1] == (
        "{after=[j-1/1, in-tx/0], peek=[j-1, j-2, j-3, later], received=[j-1, j-2, j-3], "
        "session=J1:st, sessionMessage=s-1}"
    )
    shown = daemon.cli("-o", "json", "queue", "show", "jq", check=True).json()
    assert shown["active_message_count"] == 0 and shown["dead_letter_message_count"] == 1
