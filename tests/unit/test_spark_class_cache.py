"""Spark's class archive: used when whole, written once, never half (sbctl.spark.session).

The JVM side (an archive written at exit, then mapped) runs in every Spark test; these check
the choices around it with real files and real processes standing in for the JVM.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")

from pyspark import SparkContext

from sbctl.spark import session


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "classes"
    monkeypatch.setenv(session.CLASS_CACHE_ENV, str(folder))
    monkeypatch.setattr(session, "_archive", None)
    return folder


def test_off_means_no_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(session.CLASS_CACHE_ENV, "0")
    assert session.class_cache_dir() is None
    assert session.class_cache() == ""


def test_default_folder_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(session.CLASS_CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert session.class_cache_dir() == tmp_path / "sbctl" / "spark-classes"


def test_first_start_writes_under_a_temporary_name_then_later_starts_map_it(
    cache: Path,
) -> None:
    first = session.class_cache()
    assert "-XX:ArchiveClassesAtExit=" in first and ".tmp" in first
    pending = session._archive
    assert pending is not None and pending.lock.exists()
    # A second command meanwhile neither writes nor maps anything.
    saved, session._archive = session._archive, None
    assert session.class_cache() == ""
    session._archive = saved
    pending.final.write_bytes(b"whole")  # as stop() renames it after a clean exit
    pending.lock.unlink()
    session._archive = None
    assert session.class_cache() == f"-XX:SharedArchiveFile={pending.final} " + (
        "-Xlog:cds=off -Xlog:cds+dynamic=off"
    )


def test_a_stale_lock_is_taken_over_and_old_temporaries_go(cache: Path) -> None:
    session.class_cache()
    first = session._archive
    assert first is not None
    left = first.pending.with_name(first.pending.name.replace(str(os.getpid()), "1"))
    left.write_bytes(b"half")
    old = time.time() - session.CLASS_CACHE_LOCK_SECONDS - 5
    os.utime(first.lock, (old, old))
    session._archive = None
    assert "ArchiveClassesAtExit" in session.class_cache()
    assert not left.exists()


class _Session:
    def __init__(self) -> None:
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True


def _jvm(monkeypatch: pytest.MonkeyPatch, script: str) -> Any:
    """A process in the JVM's place: it gets EOF on stdin, runs ``script`` and exits."""
    proc = subprocess.Popen(["sh", "-c", f"cat >/dev/null; {script}"], stdin=subprocess.PIPE)

    class Gateway:
        def __init__(self) -> None:
            self.proc = proc

        def shutdown(self) -> None:
            pass

    monkeypatch.setattr(SparkContext, "_gateway", Gateway())
    monkeypatch.setattr(SparkContext, "_jvm", None)
    return proc


@pytest.mark.parametrize(("status", "kept"), [(0, True), (3, False)])
def test_stop_keeps_the_archive_only_after_a_clean_exit(
    cache: Path, monkeypatch: pytest.MonkeyPatch, status: int, kept: bool
) -> None:
    session.class_cache()
    archive = session._archive
    assert archive is not None
    proc = _jvm(monkeypatch, f"printf archive > '{archive.pending}'; exit {status}")
    spark = _Session()
    session.stop(spark)
    assert spark.stopped and proc.returncode == status
    assert archive.final.exists() is kept
    assert not archive.pending.exists() and not archive.lock.exists()
    assert SparkContext._gateway is None  # the next start launches a new JVM


def test_stop_without_an_archive_to_write_only_stops(cache: Path) -> None:
    spark = _Session()
    session.stop(spark)
    assert spark.stopped and not cache.exists()


def test_a_light_jvm_stops_at_the_first_jit_tier(cache: Path) -> None:
    light = session.java_options(True)
    assert session.LIGHT_JVM in light and "-Dlog4j2.configurationFile=" in light
    session._archive = None
    assert session.LIGHT_JVM not in session.java_options(False)
