"""The testing guide's CI recipe works: GitHub accepts the workflow, and its steps pass.

- The workflow (the ```yaml block of sbctl/guides/testing.md) is checked with actionlint,
  which knows GitHub's schema and which contexts each key allows (the old recipe used
  ``runner.temp`` in a job-level ``env:``, which GitHub rejects before any job runs; a test
  below shows actionlint catching it). Without actionlint the check is skipped, and fails
  under ``CI=true``; ``.ci/run`` installs it.
- Its ``run:`` steps then run in order in bash, as a runner would run them: ``$GITHUB_ENV``
  and ``$RUNNER_TEMP`` as on GitHub, ``${{ vars.SBCTL_GIT_URL }}`` set to this clone's
  ``file://`` URL, ``if: always()`` / ``if: failure()`` honoured, in a project of a
  ``Config.json`` and two tests: one uses the imported queue through
  ``SERVICEBUS_CONNECTION_STRING`` and the Azure SDK, one gets a fresh namespace from the
  ``sbctl_namespace`` fixture. The install step's ``pip`` checks the requirement (name,
  extra, Git URL) and clones the URL, but installs nothing: the interpreter running the suite
  already has sbctl, and must not be changed under it.
- The guide's plain shell script runs the same way in the same kind of project.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import in_ci

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "sbctl" / "guides" / "testing.md"

CONFIG = """{"UserConfig": {"Namespaces": [{"Name": "sbemulatorns",
  "Queues": [{"Name": "orders", "Properties": {"MaxDeliveryCount": 3}}]}],
  "Logging": {"Type": "File"}}}
"""
APP_TESTS = """import os

from azure.servicebus import ServiceBusClient, ServiceBusMessage


def test_the_imported_queue_through_the_sdk():
    conn = os.environ["SERVICEBUS_CONNECTION_STRING"]
    with ServiceBusClient.from_connection_string(conn) as client:
        with client.get_queue_sender("orders") as sender:
            sender.send_messages(ServiceBusMessage("hello"))
        with client.get_queue_receiver("orders", max_wait_time=5) as receiver:
            [msg] = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            receiver.complete_message(msg)
    assert str(msg) == "hello"


def test_a_fresh_namespace_sees_none_of_it(sbctl_namespace):
    assert sbctl_namespace.client.queue_list() == []
    sbctl_namespace.client.queue_create("orders")
"""
# The install step's pip: check the requirement and that its Git URL clones, install nothing.
PIP_SHIM = """#!{python}
import subprocess, sys, tempfile, tomllib
from pathlib import Path
from packaging.requirements import Requirement
assert sys.argv[1] == "install", sys.argv
[requirement] = sys.argv[2:]
req = Requirement(requirement)
assert req.name == "sbctl-emulator" and "pytest" in req.extras, requirement
assert req.url and req.url.startswith("git+"), requirement
clone = Path(tempfile.mkdtemp()) / "sbctl"
subprocess.run(["git", "clone", "--quiet", "--depth", "1", req.url[4:], str(clone)], check=True)
project = tomllib.loads((clone / "pyproject.toml").read_text())["project"]
assert project["name"] == req.name and "pytest" in project["optional-dependencies"]
print("checked", requirement)
"""


def _fenced(info: str) -> str:
    text = GUIDE.read_text(encoding="utf-8")
    found = re.findall(rf"^```{info}\n(.*?)^```", text, flags=re.M | re.S)
    assert len(found) == 1, f"{GUIDE.name} must have one ```{info} block"
    return found[0]


def _actionlint() -> str:
    found = shutil.which("actionlint")
    gopath = subprocess.run(["go", "env", "GOPATH"], capture_output=True, text=True).stdout
    candidates = [found] if found else []
    candidates += [str(Path(p) / "bin" / "actionlint") for p in gopath.split() if p]
    candidates.append(str(Path.home() / "go" / "bin" / "actionlint"))
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    reason = "actionlint is not installed (.ci/run installs it with `go install`)"
    if in_ci():
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


def _lint(workflow: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    folder = tmp / ".github" / "workflows"
    folder.mkdir(parents=True)
    (folder / "tests.yml").write_text(workflow)
    return subprocess.run(
        [_actionlint(), "-no-color", ".github/workflows/tests.yml"],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_github_accepts_the_workflow(tmp_path: Path) -> None:
    answer = _lint(_fenced("yaml"), tmp_path)
    assert answer.returncode == 0, answer.stdout + answer.stderr


def test_actionlint_refuses_the_runner_context_in_a_job_env(tmp_path: Path) -> None:
    workflow = _fenced("yaml").replace(
        "    runs-on: ubuntu-latest\n",
        "    runs-on: ubuntu-latest\n"
        "    env:\n"
        "      SBCTL_DATA_DIR: ${{ runner.temp }}/sbctl-data\n",
    )
    answer = _lint(workflow, tmp_path)
    assert answer.returncode != 0 and '"runner" is not allowed here' in answer.stdout


def _project(tmp: Path) -> tuple[Path, dict[str, str]]:
    """A project with a Config.json and tests, and the environment of a fresh runner."""
    project = tmp / "project"
    (project / "tests").mkdir(parents=True)
    (project / "Config.json").write_text(CONFIG)
    (project / "tests" / "test_app.py").write_text(APP_TESTS)
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbctl").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m sbctl.cli.app "$@"\n')
    (bin_dir / "pip").write_text(PIP_SHIM.format(python=sys.executable))
    for name in ("sbctl", "pip"):
        (bin_dir / name).chmod(0o755)
    for name in ("python", "python3"):
        # A script, not a symlink: a symlink to a venv's python outside the venv's bin/
        # starts the base interpreter, without the venv's packages.
        (bin_dir / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        (bin_dir / name).chmod(0o755)
    (tmp / "runner").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SBCTL_", "PYTEST_"))}
    env.pop("SERVICEBUS_CONNECTION_STRING", None)
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "daemon")]),
        RUNNER_TEMP=str(tmp / "runner"),
        HOME=str(tmp),
    )
    return project, env


def _expand(value: Any) -> str:
    text = str(value).replace("${{ vars.SBCTL_GIT_URL }}", ROOT.resolve().as_uri())
    assert "${{" not in text, f"an expression the test does not know: {text}"
    return text


def _run_steps(steps: list[dict[str, Any]], project: Path, env: dict[str, str]) -> list[str]:
    """Run the ``run:`` steps as a runner would; return a log of what ran and how it ended."""
    github_env = Path(env["RUNNER_TEMP"]) / "github_env"
    failed = False
    log: list[str] = []
    for step in steps:
        wanted = {"always()": True, "failure()": failed}.get(step.get("if", ""), not failed)
        if "run" not in step or not wanted:
            continue
        github_env.write_text("")
        step_env = dict(env, GITHUB_ENV=str(github_env))
        step_env.update({k: _expand(v) for k, v in step.get("env", {}).items()})
        answer = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", _expand(step["run"])],
            cwd=project,
            env=step_env,
            capture_output=True,
            text=True,
            timeout=240,
            stdin=subprocess.DEVNULL,
        )
        log.append(f"--- {step['name']}: exit {answer.returncode}\n{answer.stdout}{answer.stderr}")
        failed = failed or answer.returncode != 0
        for line in github_env.read_text().splitlines():
            key, _, value = line.partition("=")
            env[key] = value
    return log


@pytest.mark.timeout(600)
def test_the_workflow_steps_pass(tmp_path: Path) -> None:
    project, env = _project(tmp_path)
    steps = yaml.safe_load(_fenced("yaml"))["jobs"]["test"]["steps"]
    log = _run_steps(steps, project, env)
    report = "\n".join(log)
    assert all(": exit 0\n" in entry for entry in log), report
    names = [entry.split(":")[0].removeprefix("--- ") for entry in log]
    assert names == [
        "Install sbctl and pytest",
        "Start the broker",
        "Create the queues and topics",
        "Test",
        "Stop the broker",
    ], report
    assert "2 passed" in report, report


@pytest.mark.timeout(600)
def test_the_plain_script_passes(tmp_path: Path) -> None:
    project, env = _project(tmp_path)
    (project / "ci.sh").write_text(_fenced("bash"))
    answer = subprocess.run(
        ["bash", "ci.sh"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )
    assert answer.returncode == 0, answer.stdout + answer.stderr
    assert "2 passed" in answer.stdout, answer.stdout
