"""Spark's Python workers find sbctl wherever the command runs from.

- A venv's ``bin/sbctl``, called by its absolute path with a bare PATH (the venv not
  activated, no PYTHONPATH), loads and exports: the workers run the command's own Python,
  not the ``python3`` first on PATH. The JVM's output goes to ``spark.log`` in the data
  dir, not the terminal (the progress bar stays intact), and rejected rows are reported on
  stderr although the load succeeds.
- A worker Python that lacks a library fails the command with one line naming it.
- On a real standalone cluster (master and worker from pyspark's own ``bin/spark-class``, on
  loopback) sbctl ships its code with the job: the executors' Python has only the libraries
  the tasks import, not sbctl.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pty
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sbctl.spark.failures import WORKER_LIBRARIES
from sbctl.spark.session import class_cache_dir

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "data" / "sample_messages.jsonl"  # 51 rows, 2 of them rejected
SAMPLE_LOADED, SAMPLE_REJECTED = 49, 2
BARE_PATH = "/usr/bin:/bin"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]")


def make_venv(folder: Path, *, system_site: bool, paths: list[Path]) -> Path:
    """A venv (no pip: fast) whose site-packages also holds ``paths``; its python. With
    ``system_site`` it also sees the packages of the interpreter running the tests, which
    is a venv of its own when the suite runs in one (``--system-site-packages`` alone
    would only show the base interpreter's)."""
    if system_site:
        running = sysconfig.get_paths()
        paths = [*paths, *(Path(running[k]) for k in ("purelib", "platlib"))]
    args = [sys.executable, "-m", "venv", "--without-pip"]
    subprocess.run(
        [*args, *(["--system-site-packages"] if system_site else []), str(folder)],
        check=True,
        timeout=60,
    )
    (site,) = folder.glob("lib/python3*/site-packages")
    (site / "extra.pth").write_text("".join(f"{p}\n" for p in paths))
    return folder / "bin" / "python"


def install_console_script(venv: Path) -> Path:
    """``bin/sbctl`` as pip writes a console script (shebang: the venv's python)."""
    script = venv / "bin" / "sbctl"
    script.write_text(
        f"#!{venv / 'bin' / 'python'}\n"
        "import sys\n"
        "from sbctl.cli.app import main\n"
        "if __name__ == '__main__':\n"
        "    sys.exit(main())\n"
    )
    script.chmod(0o755)
    return script


def only_the_libraries(folder: Path) -> Path:
    """A folder holding the libraries Spark tasks import (links), and nothing else."""
    folder.mkdir()
    for name in WORKER_LIBRARIES:
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None, name
        source = Path(spec.origin)
        if spec.submodule_search_locations:
            source = source.parent
        (folder / source.name).symlink_to(source)
        for info in source.parent.glob(f"{name}-*.dist-info"):  # crc32c reads its version
            (folder / info.name).symlink_to(info)
    return folder


def bare_env(daemon: Any, home: Path) -> dict[str, str]:
    """What a user's shell has without the venv: no PYTHONPATH, PATH without the venv."""
    env = {
        "PATH": BARE_PATH,
        "HOME": str(home),
        "TERM": "xterm",
        "COLUMNS": "120",
        "SBCTL_DATA_DIR": daemon.env["SBCTL_DATA_DIR"],
        "SBCTL_SOCKET": daemon.env["SBCTL_SOCKET"],
        # Spark's class archive stays the user's (with a fresh HOME every JVM starts cold)
        "SBCTL_SPARK_CLASS_CACHE": str(class_cache_dir() or 0),
    }
    return {**env, **java_home()}


def java_home() -> dict[str, str]:
    """JAVA_HOME, where java is not in the bare PATH."""
    java = shutil.which("java")
    if os.environ.get("JAVA_HOME"):
        return {"JAVA_HOME": os.environ["JAVA_HOME"]}
    if java and os.path.dirname(java) not in BARE_PATH.split(":"):
        return {"JAVA_HOME": str(Path(os.path.realpath(java)).parents[1])}
    return {}


def run_with_terminal_stderr(
    cmd: list[str], env: dict[str, str], cwd: Path
) -> tuple[int, str, str]:
    """Run ``cmd`` with stderr on a pseudo-terminal (so the progress bar draws), stdout on a
    pipe; returns (status, stdout, everything the terminal received)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, env=env, cwd=cwd
    )
    os.close(slave)
    chunks: list[bytes] = []

    def drain() -> None:
        while True:
            ready, _, _ = select.select([master], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    return
                continue
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child side closed
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        reader.join(timeout=10)
        os.close(master)
    return proc.returncode, out.decode(), b"".join(chunks).decode("utf-8", "replace")


@pytest.mark.timeout(400)
def test_unactivated_venv_console_script_loads_and_exports(daemon: Any, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    python = make_venv(venv, system_site=True, paths=[ROOT, ROOT / "daemon"])
    sbctl = install_console_script(venv)
    env = bare_env(daemon, tmp_path)
    where = subprocess.run(
        [str(python), "-c", "import sbctl; print(sbctl.__file__)"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.strip() == str(ROOT / "sbctl" / "__init__.py"), "the tree under test"
    assert shutil.which("python3", path=BARE_PATH) != str(python)
    daemon.cli("queue", "create", "orders", check=True)

    # cwd: a folder with no sbctl in it (Python puts the cwd on the workers' path).
    status, out, terminal = run_with_terminal_stderr(
        [str(sbctl), "spark-load", str(SAMPLE), "--entity", "orders", "--master", "local[2]"],
        env,
        tmp_path,
    )
    text = ANSI.sub("", terminal)
    assert status == 0, text
    assert re.search(rf"messages_loaded\s+{SAMPLE_LOADED}\b", out), out
    assert re.search(rf"rejected\s+{SAMPLE_REJECTED}\b", out), out
    shown = daemon.cli("-o", "json", "queue", "show", "orders", check=True).json()
    assert shown["active_message_count"] == SAMPLE_LOADED

    # The terminal got the progress bar and the rejects warning, and nothing from the JVM.
    assert "spark-load:" in text, "no progress bar was drawn"
    rejects = next(Path(daemon.env["SBCTL_DATA_DIR"], "staging").glob("rejects-*.jsonl"))
    warning = (
        f"warning: {SAMPLE_REJECTED} rows were rejected and not loaded; rows and reasons in "
        f"{rejects}"
    )
    assert warning in text
    assert len(rejects.read_text().splitlines()) == SAMPLE_REJECTED
    for piece in re.split(r"[\r\n]+", text):
        piece = piece.strip()
        assert not piece or "spark-load:" in piece or piece == warning, repr(piece)

    log = Path(daemon.env["SBCTL_DATA_DIR"]) / "spark.log"
    logged = log.read_text()
    assert "sbctl spark-load --master local[2]" in logged
    assert len(logged.splitlines()) > 1, "the JVM's own output is in spark.log"

    export = subprocess.run(
        [
            str(sbctl),
            "-o",
            "json",
            "spark-export",
            "orders",
            "--to",
            str(tmp_path / "out"),
            "--master",
            "local[2]",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert export.returncode == 0, export.stderr
    assert export.stderr == "", "nothing but errors on stderr"
    assert json.loads(export.stdout)["messages"] == SAMPLE_LOADED
    assert list((tmp_path / "out").glob("part-*.parquet"))
    assert "sbctl spark-export --master local[2]" in log.read_text()


@pytest.mark.timeout(300)
def test_worker_python_without_a_library_fails_in_one_line(daemon: Any, tmp_path: Path) -> None:
    bare = make_venv(tmp_path / "bare", system_site=False, paths=[])
    daemon.cli("queue", "create", "q", check=True)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sbctl.cli.app",
            "spark-load",
            str(SAMPLE),
            "--entity",
            "q",
            "--master",
            "local[1]",
            "--spark-conf",
            f"spark.pyspark.python={bare}",
        ],
        env=daemon.env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 1, proc
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(
        "error: the Spark job failed: ModuleNotFoundError: No module named 'msgspec' "
        f"(Spark's Python workers run {bare}; they need msgspec, crc32c, xxhash"
    ), proc.stderr
    shown = daemon.cli("-o", "json", "queue", "show", "q", check=True).json()
    assert shown["total_message_count"] == 0


def test_a_jvm_that_does_not_start_is_one_line_saying_why(daemon: Any, tmp_path: Path) -> None:
    daemon.cli("queue", "create", "q", check=True)
    env = {**daemon.env, "JAVA_HOME": str(tmp_path / "no-java")}
    proc = subprocess.run(
        [sys.executable, "-m", "sbctl.cli.app", "spark-load", str(SAMPLE), "--entity", "q"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    log = Path(daemon.env["SBCTL_DATA_DIR"]) / "spark.log"
    assert proc.returncode == 5, proc
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("error: Spark did not start (--master local[*]): "), proc.stderr
    assert f"{tmp_path / 'no-java'}/bin/java: No such file or directory" in proc.stderr
    assert proc.stderr.endswith(f"(log: {log})\n")
    assert "No such file or directory" in log.read_text()


# -- a standalone cluster on loopback


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(check: Any, what: str, procs: list[subprocess.Popen[bytes]], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        for p in procs:
            assert p.poll() is None, f"{p.args[1]} exited ({p.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} after {seconds} s"
        time.sleep(0.25)


@pytest.fixture
def standalone_cluster(tmp_path: Path) -> Iterator[str]:
    """A Spark standalone master and one worker (1 core) on 127.0.0.1; the master URL."""
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    # The workers' own python3 (on a bare PATH) has no sbctl, as on a real cluster.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    env.update(PATH=BARE_PATH, SPARK_LOCAL_IP="127.0.0.1", **java_home())
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    logs = tmp_path / "cluster-logs"
    logs.mkdir()
    procs: list[subprocess.Popen[bytes]] = []

    def launch(name: str, *args: str) -> Path:
        log = logs / f"{name}.log"
        with log.open("wb") as fh:
            procs.append(
                subprocess.Popen(
                    [str(spark_class), *args],
                    stdin=subprocess.DEVNULL,
                    stdout=fh,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=tmp_path,
                    start_new_session=True,  # the JVM and its children: one group to kill
                )
            )
        return log

    def accepts() -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", port)) == 0

    try:
        launch(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--webui-port",
            str(free_port()),
        )
        wait_for(accepts, "master listening", procs, 90)
        worker = launch(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            url,
            "--host",
            "127.0.0.1",
            "--cores",
            "1",
            "--memory",
            "1g",
            "--webui-port",
            str(free_port()),
            "--work-dir",
            str(tmp_path / "work"),
        )
        wait_for(
            lambda: b"Successfully registered with master" in worker.read_bytes(),
            "worker registered",
            procs,
            90,
        )
        yield url
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


@pytest.mark.timeout(420)
def test_load_through_a_standalone_cluster_ships_sbctl(
    daemon: Any, standalone_cluster: str, tmp_path: Path
) -> None:
    # The executors' Python: the libraries the tasks import, and no sbctl.
    libs = only_the_libraries(tmp_path / "libs")
    executor_python = make_venv(tmp_path / "executor", system_site=False, paths=[libs])
    probe = subprocess.run(
        [str(executor_python), "-c", "import sbctl"],
        cwd=tmp_path,
        capture_output=True,
        env={"PATH": BARE_PATH},
    )
    assert probe.returncode != 0, "the executors' Python must not have sbctl of its own"

    rows = 5_000
    source = tmp_path / "rows.jsonl"
    source.write_text(
        "".join(
            json.dumps({"body": f"row {i}", "message_id": f"m-{i}", "partition_key": f"k{i % 97}"})
            + "\n"
            for i in range(rows)
        )
    )
    daemon.cli("queue", "create", "big", "--enable-partitioning", check=True)
    env = {**daemon.env, "SPARK_LOCAL_IP": "127.0.0.1"}
    cmd = [
        sys.executable,
        "-m",
        "sbctl.cli.app",
        "-o",
        "json",
        "spark-load",
        str(source),
        "--entity",
        "big",
        "--master",
        standalone_cluster,
        "--spark-conf",
        f"spark.pyspark.python={executor_python}",
        "--spark-conf",
        "spark.executor.memory=512m",
        "--spark-conf",
        "spark.cores.max=1",
    ]
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=360)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    summary = json.loads(proc.stdout)
    assert summary["rows_read"] == rows and summary["rejected"] == 0
    assert summary["messages_loaded"] == rows
    shown = daemon.cli("-o", "json", "queue", "show", "big", check=True).json()
    assert shown["active_message_count"] == rows
