"""Every example of the user docs runs as written: README.md and each guide in sbctl/guides/.

Each file's runnable blocks run in order, each in a fresh process, on a private data dir and
daemon of that file's own (free ports), so state passes from block to block only through the
daemon and its data dir, as it does for a reader. The convention, checked here:

- a block fenced ```sh, ```bash, ```shell or bare ``` is run by ``bash -e -o pipefail``;
- a ```console block is run by bash too: its ``$ `` lines are the commands (a line ending in
  ``\\`` continues on the next), every other line is output and is not compared;
- a ```python block is run by this interpreter;
- any block preceded by the line ``<!-- not-run: REASON -->`` is skipped, and REASON must say
  why (another language, needs a terminal, output shown for reading);
- any other block (```text, ```json, ```js, ...) without that marker fails the test.

``sbctl`` resolves to the tree under test (a wrapper running ``sys.executable -m
sbctl.cli.app``), ``python`` to this interpreter. Installing is the environment's job: lines
that start with ``pip install`` are left out, and so is the quick start's leading
``pip install ... &&``. README's test-command block (the whole suite) is not run. Only exit
statuses are checked, never output text; a failure names the file, the block's line and its
first command, with its output.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sbctl.spark.session import class_cache_dir

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
GUIDES = ROOT / "sbctl" / "guides"
SHELL_INFO = {"", "sh", "bash", "shell"}
NOT_RUN = re.compile(r"^<!-- not-run:(.*)-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,})(.*)$")
BLOCK_TIMEOUT_S = 300  # the Spark guide's load starts a JVM


@dataclass(frozen=True)
class Block:
    line: int  # 1-based line of the opening fence
    kind: str  # "sh", "python", or "skip"
    code: str  # the code to run; for "skip", the reason


class DocError(ValueError):
    """A block that breaks the convention: the message names its line."""


def documents() -> list[Path]:
    return [README, *sorted(GUIDES.glob("*.md"))]


def blocks(text: str) -> list[Block]:
    """The blocks of a Markdown text, in order, with what to do with each."""
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
        fence = FENCE.match(line)
        if not fence:
            i += 1
            continue
        ticks, info = fence.group(2), fence.group(3).strip().split(" ")[0].lower()
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(ticks):
            end += 1
        if not skip_region:
            found.append(_block(i + 1, info, lines[i + 1 : end], _marker(lines, i)))
        i = end + 1
    return [b for b in found if b.kind == "skip" or b.code.strip()]


def _marker(lines: list[str], fence: int) -> str | None:
    """The reason of a ``<!-- not-run: ... -->`` line just above the fence, if any."""
    before = fence - 1
    while before >= 0 and not lines[before].strip():
        before -= 1
    match = NOT_RUN.match(lines[before].strip()) if before >= 0 else None
    if match is None:
        return None
    reason = match.group(1).strip()
    if not reason:
        raise DocError(f"line {fence + 1}: a not-run marker must give its reason")
    return reason


def _block(line: int, info: str, body: list[str], reason: str | None) -> Block:
    body = textwrap.dedent("\n".join(body)).splitlines()  # a block inside a list item
    if reason is not None:
        return Block(line, "skip", reason)
    if info in SHELL_INFO:
        return Block(line, "sh", _without_installs("\n".join(body)))
    if info == "console":
        return Block(line, "sh", _without_installs(_console_commands(body)))
    if info == "python":
        return Block(line, "python", "\n".join(body))
    raise DocError(
        f"line {line}: a ```{info} block must be run (sh, bash, console, python) or be "
        "preceded by <!-- not-run: REASON -->"
    )


def _console_commands(body: list[str]) -> str:
    commands: list[str] = []
    continued = False
    for line in body:
        if continued or line.startswith("$ "):
            commands.append(line if continued else line[2:])
            continued = line.rstrip().endswith("\\")
    return "\n".join(commands)


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


def test_every_document_follows_the_convention() -> None:
    runnable = 0
    for doc in documents():
        try:
            found = blocks(doc.read_text(encoding="utf-8"))
        except DocError as exc:
            pytest.fail(f"{doc.relative_to(ROOT)}: {exc}")
        runnable += sum(b.kind != "skip" for b in found)
    assert runnable >= 40, "the docs lost their runnable blocks"
    readme = [b for b in blocks(README.read_text(encoding="utf-8")) if b.kind != "skip"]
    assert sum(b.kind == "sh" for b in readme) >= 8, "README's tour lost its shell blocks"
    assert any(b.kind == "python" for b in readme), "README has no Python example"
    assert "sbctl daemon start" in readme[0].code, "README's first runnable block starts the daemon"


def test_block_extraction_rules() -> None:
    text = "\n".join(
        [
            "```sh",
            "pip install -e .",
            "sbctl queue list",
            "```",
            "<!-- not-run: output, shown for reading -->",
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
            "```console",
            "$ sbctl send q \\",
            "    --body x",
            "sent 1 message",
            "$ sbctl peek q",
            "```",
        ]
    )
    assert [(b.line, b.kind, b.code) for b in blocks(text)] == [
        (1, "sh", "sbctl queue list"),
        (6, "skip", "output, shown for reading"),
        (9, "sh", "sbctl daemon start"),
        (17, "python", "print(1)"),
        (20, "sh", "sbctl send q \\\n    --body x\nsbctl peek q"),
    ]


@pytest.mark.parametrize(
    "text",
    ["```text\nx\n```", "```js\nx\n```", "<!-- not-run:  -->\n```text\nx\n```"],
    ids=["text", "js", "empty-reason"],
)
def test_unmarked_or_unexplained_blocks_are_refused(text: str) -> None:
    with pytest.raises(DocError, match="line"):
        blocks(text)


# The `sbctl` on the blocks' PATH. With a zygote (tests/forkcli.py) it is a small stdlib-only
# script that hands its arguments, environment, directory and stdin/stdout/stderr to the
# zygote, which forks the CLI with everything imported (~30 ms a call instead of ~300 ms);
# the CLI runs in a process of its own, as the console script would.
FORKED_SBCTL = """#!{python} -I
import json, os, socket, sys
request = {{"args": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd()}}
with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
    conn.connect({path!r})
    socket.send_fds(conn, [json.dumps(request).encode()], [0, 1, 2])
    answers = conn.makefile("rb")
    json.loads(answers.readline())
    status = json.loads(answers.readline())["status"]
sys.exit(status if status >= 0 else 128 - status)
"""


@pytest.fixture(scope="module")
def zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str | None]:
    """A CLI zygote for the blocks' `sbctl` calls (None with SBCTL_TEST_FRESH_CLI=1)."""
    if os.environ.get("SBCTL_TEST_FRESH_CLI") == "1":
        yield None
        return
    path = str(tmp_path_factory.mktemp("zygote") / "z.sock")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SBCTL_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests"), str(ROOT), str(ROOT / "daemon")])
    proc = subprocess.Popen(
        [sys.executable, "-c", f"import forkcli; forkcli.serve({path!r})"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None
    ready = proc.stdout.readline().strip() == b"ready"
    proc.stdout.close()
    try:
        yield path if ready else None
    finally:
        proc.kill()
        proc.wait()


def _environment(tmp: Path, zygote: str | None) -> dict[str, str]:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "sbctl"
    if zygote is None:
        wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m sbctl.cli.app "$@"\n')
    else:
        wrapper.write_text(FORKED_SBCTL.format(python=sys.executable, path=zygote))
    wrapper.chmod(0o755)
    for name in ("python", "python3"):
        # A script, not a symlink: a symlink to a venv's python outside the venv's bin/
        # starts the base interpreter, without the venv's packages.
        (bin_dir / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        (bin_dir / name).chmod(0o755)
    home = tmp / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SBCTL_")}
    env.pop("SERVICEBUS_CONNECTION_STRING", None)
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
        # Spark's class archive stays the user's (a fresh HOME would start every JVM cold and
        # write a new one); a first run's archive is tests/unit/test_spark_class_cache.py's.
        SBCTL_SPARK_CLASS_CACHE=str(class_cache_dir() or 0),
    )
    return env


def _tail(path: Path) -> str:
    return path.read_bytes()[-3000:].decode("utf-8", "replace")


def _sbctl(env: dict[str, str], *args: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "sbctl.cli.app", *args],
        env=env,
        capture_output=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def _stop_daemon(env: dict[str, str]) -> None:
    _sbctl(env, "daemon", "stop")
    pidfile = Path(env["SBCTL_DATA_DIR"]) / "sbctld.pid"
    try:
        pid = int(pidfile.read_text().split()[0])
        os.kill(pid, signal.SIGKILL)
    except (OSError, ValueError, IndexError):
        pass


def _run(
    block: Block, number: int, env: dict[str, str], tmp: Path
) -> tuple[int | None, Path, Path]:
    if block.kind == "sh":
        argv = ["bash", "-e", "-o", "pipefail", "-c", block.code]
    else:
        argv = [sys.executable, "-c", block.code]
    # Output goes to files, not pipes: `sbctl daemon start` leaves a daemon behind that
    # would hold a pipe open (and the read waiting) until the end.
    out, err = tmp / f"block{number}.out", tmp / f"block{number}.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        try:
            code: int | None = subprocess.run(
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
    return code, out, err


def _doc_params() -> list[object]:
    params: list[object] = []
    for doc in documents():
        runnable = [b for b in blocks(doc.read_text(encoding="utf-8")) if b.kind != "skip"]
        marks = [pytest.mark.spark] if any("spark-load" in b.code for b in runnable) else []
        params.append(pytest.param(doc, marks=marks, id=doc.name))
    return params


@pytest.mark.timeout(900)
@pytest.mark.parametrize("doc", _doc_params())
def test_document_blocks_run_in_order(doc: Path, tmp_path: Path, zygote: str | None) -> None:
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    runnable = [b for b in blocks(doc.read_text(encoding="utf-8")) if b.kind != "skip"]
    if not runnable:
        pytest.skip(f"{doc.name} has no runnable block")
    env = _environment(tmp_path, zygote)
    try:
        if doc != README:  # README's first block starts the daemon; a guide starts with one
            _sbctl(env, "daemon", "start", "--wait")
        for number, block in enumerate(runnable, 1):
            code, out, err = _run(block, number, env, tmp_path)
            if code != 0:
                first = block.code.strip().splitlines()[0]
                status = f"ran over {BLOCK_TIMEOUT_S} s" if code is None else f"exited {code}"
                pytest.fail(
                    f"{doc.relative_to(ROOT)} block {number} (line {block.line}, {block.kind}, "
                    f"starting `{first}`) {status}\n--- stdout (tail)\n{_tail(out)}\n"
                    f"--- stderr (tail)\n{_tail(err)}"
                )
    finally:
        _stop_daemon(env)
