"""The Spark session spark-load and spark-export run in, and its job progress.

- Workers run the command's own Python (``sys.executable``), not whichever ``python3``
  comes first on PATH, unless the user chose one (``PYSPARK_PYTHON`` or
  ``--spark-conf spark.pyspark.python=...``): a venv's ``bin/sbctl`` works unactivated.
- sbctl ships its own code with the job (a zip given to ``addPyFile``), so executors on
  a cluster need only Python and the libraries the tasks import
  (:data:`sbctl.spark.failures.WORKER_LIBRARIES`).
- The JVM's output (log4j, the JDK's start-up warnings, Python workers' stderr) goes to a
  log file (``spark.log`` in the data dir) instead of the terminal, where it would break
  the progress bar.
- Spark's JVM loads some 10,000 classes as it starts (about 10 s of CPU on a 2-core machine).
  The first command keeps them in a class-data-sharing archive (:func:`class_cache`) that later
  starts map instead (about 4 s faster each).
"""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sbctl.core import layout
from sbctl.core.errors import BadRequest, SbctlError
from sbctl.spark import failures

# (done tasks, total tasks, what runs) -> None
Progress = Callable[[int, int, str], None]

_LOG4J = f"-Dlog4j2.configurationFile=file:{Path(__file__).with_name('log4j2.properties')}"
QUIET = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "16",
    "spark.driver.extraJavaOptions": _LOG4J,
}
PYTHON_CONF = "spark.pyspark.python"
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
LIGHT_JVM = "-XX:TieredStopAtLevel=1"  # start(light=True): the first JIT tier only
CLASS_CACHE_ENV = "SBCTL_SPARK_CLASS_CACHE"  # a folder for the archives, or 0: none
CLASS_CACHE_LOCK_SECONDS = 900  # a creator's lock older than this is stale
CLASS_CACHE_EXIT_SECONDS = 180  # how long the creating JVM may take to write the archive
LOG_BYTES = 8 * 1024 * 1024  # spark.log is moved to spark.log.1 past this size

# Where the running session's JVM writes its output (None: the terminal).
_log: Path | None = None


def parse_pairs(items: Sequence[str], flag: str) -> dict[str, str]:
    """``k=v`` flags as a dict; the error names the flag."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise BadRequest(f"{flag}: {item!r} is not key=value")
        out[key] = value
    return out


def is_local(master: str) -> bool:
    """Whether ``master`` runs the tasks in this process's JVM (``local``, ``local[N]``)."""
    return master in ("", "local") or master.startswith("local[")


def worker_python(conf: dict[str, str]) -> str:
    """The Python Spark's workers run: the user's choice, else this command's own."""
    chosen = conf.get(PYTHON_CONF) or os.environ.get("PYSPARK_PYTHON")
    return chosen or sys.executable or "python3"


def code_zip() -> str:
    """sbctl's own package as a zip for ``addPyFile`` (removed when this process exits)."""
    root = Path(__file__).resolve().parents[1]  # the sbctl package
    folder = tempfile.mkdtemp(prefix="sbctl-code-")
    atexit.register(shutil.rmtree, folder, True)
    path = Path(folder) / "sbctl.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for file in sorted(root.rglob("*")):
            if file.is_file() and "__pycache__" not in file.parts and file.suffix != ".pyc":
                zf.write(file, Path("sbctl") / file.relative_to(root))
    return str(path)


@dataclass(frozen=True)
class _Archive:
    """The class archive this process's JVM writes as it exits (the first start only)."""

    pending: Path  # where the JVM writes it
    final: Path  # where later starts find it, once it is whole
    lock: Path  # held while one command writes it


# Set by start() when its JVM writes the archive; stop() then waits for it.
_archive: _Archive | None = None


def class_cache_dir() -> Path | None:
    """Where the class archives live: ``$SBCTL_SPARK_CLASS_CACHE`` (``0``: nowhere, no
    archive), else ``$XDG_CACHE_HOME/sbctl/spark-classes`` (``~/.cache/...``)."""
    chosen = os.environ.get(CLASS_CACHE_ENV, "")
    if chosen == "0":
        return None
    if chosen:
        return Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sbctl" / "spark-classes"


def _archive_key() -> str | None:
    """What an archive belongs to: this Spark (version, jars) and this Java runtime."""
    import pyspark

    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    jars = Path(os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)) / "jars"
    try:
        real = os.path.realpath(java or "")
        st, jst = os.stat(real), os.stat(jars)
    except OSError:
        return None
    ident = (
        f"{pyspark.__version__}|{os.path.realpath(jars)}|{jst.st_mtime_ns}|{real}|"
        f"{st.st_size}|{st.st_mtime_ns}"
    )
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def _take(lock: Path) -> bool:
    """Create ``lock`` (this process writes the archive); False while another one does."""
    for _ in range(2):
        try:
            os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            return True
        except FileExistsError:
            try:
                age = datetime.now(UTC).timestamp() - lock.stat().st_mtime
            except FileNotFoundError:
                continue
            if age < CLASS_CACHE_LOCK_SECONDS:
                return False
            lock.unlink(missing_ok=True)  # its writer died
    return False


def class_cache() -> str:
    """The JVM options that map the class archive of this Spark and Java runtime, or (the
    first time, or after either changed) make this JVM write it as it exits.

    A JDK class-data-sharing archive holds the classes parsed and verified; mapping it
    saves most of the JVM's start-up. A truncated archive crashes the JVM that maps it, so
    an archive is written under a temporary name and takes its final one only after its
    JVM exited with status 0 (:func:`stop`). No options when the cache is off, there is no
    Java, or another command is writing the archive.
    """
    global _archive
    folder = class_cache_dir()
    key = _archive_key() if folder is not None else None
    if folder is None or key is None:
        return ""
    quiet = "-Xlog:cds=off -Xlog:cds+dynamic=off"  # (what it could not archive, and why)
    final = folder / f"spark-{key}.jsa"
    if final.is_file():
        return f"-XX:SharedArchiveFile={final} {quiet}"
    lock = folder / f"spark-{key}.lock"
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not _take(lock):
            return ""
    except OSError:
        return ""
    # what a writer that was killed left
    for stale in folder.glob(f"spark-{key}.*{layout.TEMP_SUFFIX}"):
        stale.unlink(missing_ok=True)
    _archive = _Archive(folder / f"spark-{key}.{os.getpid()}{layout.TEMP_SUFFIX}", final, lock)
    return f"-XX:ArchiveClassesAtExit={_archive.pending} {quiet}"


def stop(spark: Any) -> None:
    """Stop a session :func:`start` began. When its JVM writes the class archive, end the
    JVM now (it writes the archive as it exits, some 15 s once) and keep the archive only
    if the JVM exited cleanly."""
    global _archive
    spark.stop()
    archive, _archive = _archive, None
    if archive is None:
        return
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    try:
        if gateway is not None and proc is not None and proc.stdin is not None:
            gateway.shutdown()
            SparkContext._gateway = None
            SparkContext._jvm = None
            proc.stdin.close()  # Spark's gateway exits when its stdin closes
            if proc.wait(CLASS_CACHE_EXIT_SECONDS) == 0 and archive.pending.stat().st_size:
                os.replace(archive.pending, archive.final)
    except (OSError, subprocess.TimeoutExpired):
        pass  # no archive this time: the next start tries again
    finally:
        archive.pending.unlink(missing_ok=True)
        archive.lock.unlink(missing_ok=True)


def _open_log(log: Path, app: str, master: str) -> Any:
    log.parent.mkdir(parents=True, exist_ok=True)
    try:
        if log.stat().st_size > LOG_BYTES:
            os.replace(log, layout.rotated_log(log))
    except FileNotFoundError:
        pass
    fh = layout.open_private(log, append=True)
    stamp = datetime.now(UTC).isoformat(timespec="seconds")
    fh.write(f"--- {stamp} {app} --master {master} (pid {os.getpid()})\n".encode())
    fh.flush()
    return fh


def _jvm_said(log: Path, offset: int) -> str:
    """The line explaining why the JVM stopped, from what it wrote to ``log`` after
    ``offset``: the first error or exception line, else the last line (no stack frames)."""
    try:
        with log.open("rb") as fh:
            fh.seek(offset)
            text = fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not line.startswith(("at ", "..."))]
    for line in lines:
        if re.search(r"Exception|Error|No such file|not found|not set", line):
            return line.removeprefix('Exception in thread "main" ')
    return lines[-1] if lines else ""


def java_options(light: bool) -> str:
    """sbctl's options for the JVM it starts: log4j's quiet settings, the first JIT tier
    only when ``light`` (see :func:`start`), and the class archive (:func:`class_cache`)."""
    return " ".join(
        o for o in (QUIET[JAVA_OPTIONS], LIGHT_JVM if light else "", class_cache()) if o
    )


def _jvm_running() -> bool:
    from pyspark import SparkContext

    return SparkContext._gateway is not None or "PYSPARK_GATEWAY_PORT" in os.environ


def _launch_jvm(settings: dict[str, str], master: str, app: str, log: Path) -> None:
    """Start Spark's JVM with its stdout and stderr in ``log`` (once per process)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if _jvm_running():
        return  # a JVM already runs (an earlier session of this process, or a notebook)
    conf = SparkConf(loadDefaults=False).setMaster(master).setAppName(app)
    conf.setAll(list(settings.items()))
    fh = _open_log(log, app, master)
    offset = fh.tell()
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stdout": fh, "stderr": fh})
    except Exception as exc:
        said = _jvm_said(log, offset)
        reason = failures.cause(exc) + (f"; the JVM said: {said}" if said else "")
        raise BadRequest(
            f"Spark did not start (--master {master}): {reason} (log: {log})"
        ) from None
    finally:
        fh.close()
    SparkContext._ensure_initialized(gateway=gateway)


def start(
    master: str, conf: dict[str, str], app: str, log: Path | None = None, *, light: bool = False
) -> Any:
    """A SparkSession (one per command); ``conf`` wins over sbctl's quiet defaults.

    ``log``: the file the JVM's output goes to (None: this process's stdout and stderr).
    ``light``: the JVM only schedules Python tasks (no rows pass through it), so its
    just-in-time compiler stops at the quick first tier: about 2 s less to start on 2 cores,
    at no cost to a job whose work is in Python.
    """
    global _log
    from pyspark.sql import SparkSession

    settings = {**QUIET, **conf}
    if JAVA_OPTIONS not in conf and not _jvm_running():
        settings[JAVA_OPTIONS] = java_options(light)
    python = worker_python(conf)
    saved = os.environ.get("PYSPARK_PYTHON")
    os.environ["PYSPARK_PYTHON"] = python  # read once, when the SparkContext starts
    try:
        if log is not None:
            _launch_jvm(settings, master, app, log)
        builder = SparkSession.builder.master(master).appName(app)
        for key, value in settings.items():
            builder = builder.config(key, value)
        try:
            spark = builder.getOrCreate()
        except Exception as exc:  # the JVM did not start: no java, bad master URL
            where = f" (log: {log})" if log is not None else ""
            raise BadRequest(
                f"Spark did not start (--master {master}): {failures.cause(exc)}{where}"
            ) from None
    finally:
        if saved is None:
            os.environ.pop("PYSPARK_PYTHON", None)
        else:
            os.environ["PYSPARK_PYTHON"] = saved
    _log = log
    if log is None:
        spark.sparkContext.setLogLevel("ERROR")
    # Also in local mode, where it costs a few milliseconds: a Python the user chose for the
    # workers then needs only the libraries, as on a cluster.
    spark.sparkContext.addPyFile(code_zip())
    return spark


def first_line(exc: BaseException) -> str:
    """``exc`` in one line: the Python or Java cause, not the stack traces."""
    return failures.cause(exc)


@contextmanager
def watching(spark: Any, report: Progress | None, what: str) -> Iterator[None]:
    """Run a Spark job: feed ``report`` with its task counts while the block runs, and turn
    a failure into one line naming its cause (:func:`sbctl.spark.failures.job_failed`)."""
    stop = threading.Event()
    thread = None
    if report is not None:
        tracker = spark.sparkContext.statusTracker()
        group = f"sbctl-{id(stop)}"
        spark.sparkContext.setJobGroup(group, what)

        def poll() -> None:
            while not stop.wait(0.2):
                done = total = 0
                for job in tracker.getJobIdsForGroup(group):
                    info = tracker.getJobInfo(job)
                    for stage in info.stageIds if info else ():
                        s = tracker.getStageInfo(stage)
                        if s is not None:
                            done += s.numCompletedTasks
                            total += s.numTasks
                if total:
                    report(done, total, what)

        thread = threading.Thread(target=poll, daemon=True)
        thread.start()
    try:
        yield
    except SbctlError:
        raise
    except Exception as exc:
        python = str(getattr(spark.sparkContext, "pythonExec", "") or worker_python({}))
        raise failures.job_failed(exc, python, str(_log) if _log else None) from None
    finally:
        stop.set()
        if thread is not None:
            thread.join()
