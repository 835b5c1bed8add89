"""README's examples run as written: every shell and Python block, in order, on a fresh data dir.

A block fenced with ```sh, ```bash or a bare ``` is run with ``bash -e -o pipefail``; a
```python block with this interpreter. Blocks with any other info string (```text, ```console,
```json, ```py for Python that is shown but not run, ...) are output or syntax. ``sbctl``
resolves to the tree under test (a wrapper running ``sys.executable -m sbctl.cli.app``),
``python`` to this interpreter, and the daemon uses a temporary data dir and socket (and free
ports). Blocks are bounded by a timeout each; README keeps live views (``--watch``) out of
runnable blocks. Installing is the environment's job: lines that start with ``pip install`` are
left out, and so is the quick start's leading ``pip install ... &&``. The test-command block
(the whole suite) is not run.

The run stops at the first block that fails and names it (its number, its line in README
and its first command), with its output. Only exit statuses are checked, never output text.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SHELL_INFO = {"", "sh", "bash", "shell"}
BLOCK_TIMEOUT_S = 300  # the Spark block starts a JVM up to three times


@dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the opening fence
    kind: str  # "sh" or "python"
    code: str


def blocks(text: str) -> list[Block]:
    """The runnable blocks of a Markdown text, in order."""
    found: list[Block] = []
    lines = text.splitlines()
    skip_region = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if "<!-- test-command:start -->" in line:
            skip_region = True
        elif "<!-- test-command:end -->" in line:
            skip_region = False
        fence = re.match(r"^(\s*)(`{3,})(.*)$", line)
        if not fence:
            i += 1
            continue
        ticks, info = fence.group(2), fence.group(3).strip().split(" ")[0].lower()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(ticks):
            body.append(lines[j])
            j += 1
        if not skip_region:
            if info in SHELL_INFO:
                code = _without_installs("\n".join(body))
                if code.strip():
                    found.append(Block(i + 1, "sh", code))
            elif info == "python":
                found.append(Block(i + 1, "python", "\n".join(body)))
        i = j + 1
    return found


def _without_installs(code: str) -> str:
    out = []
    for line in code.splitlines():
        stripped = line.lstrip()
        if stripped.startswith("pip install"):
            rest = re.sub(r"^pip install [^&]*&&\s*", "", stripped)
            if rest == stripped:  # a bare install line
                continue
            line = rest
        out.append(line)
    return "\n".join(out)


def test_readme_has_runnable_blocks() -> None:
    found = blocks(README.read_text(encoding="utf-8"))
    assert sum(b.kind == "sh" for b in found) >= 15, "README's tour lost its shell blocks"
    assert any(b.kind == "python" for b in found), "README has no Python example"
    assert "sbctl daemon start" in found[0].code, "the first runnable block must start the daemon"


def test_block_extraction_rules() -> None:
    text = "\n".join(
        [
            "```sh",
            "pip install -e .",
            "sbctl queue list",
            "```",
            "```text",
            "not run",
            "```",
            "```",
            "pip install -e . && sbctl daemon start",
            "```",
            "<!-- test-command:start -->",
            "```",
            "python -m pytest",
            "```",
            "<!-- test-command:end -->",
            "```python",
            "print(1)",
            "```",
        ]
    )
    found = blocks(text)
    assert [(b.line, b.kind, b.code) for b in found] == [
        (1, "sh", "sbctl queue list"),
        (8, "sh", "sbctl daemon start"),
        (16, "python", "print(1)"),
    ]


def _environment(tmp: Path) -> dict[str, str]:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "sbctl"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m sbctl.cli.app "$@"\n')
    wrapper.chmod(0o755)
    for name in ("python", "python3"):
        (bin_dir / name).symlink_to(sys.executable)
    home = tmp / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SBCTL_")}
    data = tmp / "data"
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "daemon")]),
        HOME=str(home),
        SBCTL_DATA_DIR=str(data),
        SBCTL_SOCKET=str(data / "sbctld.sock"),
        # Any network endpoint the daemon opens takes a free port, never the well-known one
        # (other tests and a developer's own daemon may hold it).
        SBCTL_AMQP_PORT="0",
        SBCTL_HTTP_PORT="0",
        TMPDIR=str(tmp),
    )
    return env


def _tail(path: Path) -> str:
    return path.read_bytes()[-3000:].decode("utf-8", "replace")


def _stop_daemon(env: dict[str, str]) -> None:
    subprocess.run(
        [sys.executable, "-m", "sbctl.cli.app", "daemon", "stop"],
        env=env,
        capture_output=True,
        timeout=60,
    )
    pidfile = Path(env["SBCTL_DATA_DIR"]) / "sbctld.pid"
    try:
        pid = int(pidfile.read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
    except (OSError, ValueError, IndexError):
        pass


@pytest.mark.spark  # the tour loads and exports with Spark
@pytest.mark.timeout(1200)
def test_readme_walkthrough_runs_in_order(tmp_path: Path) -> None:
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    env = _environment(tmp_path)
    found = blocks(README.read_text(encoding="utf-8"))
    try:
        for number, block in enumerate(found, 1):
            if block.kind == "sh":
                argv = ["bash", "-e", "-o", "pipefail", "-c", block.code]
            else:
                argv = [sys.executable, "-c", block.code]
            # Output goes to files, not pipes: `sbctl daemon start` leaves a daemon behind
            # that would hold a pipe open (and the read waiting) until the end.
            out, err = tmp_path / f"block{number}.out", tmp_path / f"block{number}.err"
            with out.open("wb") as stdout, err.open("wb") as stderr:
                try:
                    code = subprocess.run(
                        argv,
                        cwd=ROOT,
                        env=env,
                        stdout=stdout,
                        stderr=stderr,
                        timeout=BLOCK_TIMEOUT_S,
                        stdin=subprocess.DEVNULL,
                    ).returncode
                except subprocess.TimeoutExpired:
                    code = None
            if code != 0:
                first = block.code.strip().splitlines()[0]
                status = f"ran over {BLOCK_TIMEOUT_S} s" if code is None else f"exited {code}"
                pytest.fail(
                    f"README block {number} (line {block.line}, {block.kind}, starting "
                    f"`{first}`) {status}\n--- stdout (tail)\n{_tail(out)}\n"
                    f"--- stderr (tail)\n{_tail(err)}"
                )
    finally:
        _stop_daemon(env)
