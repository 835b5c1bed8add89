"""Files of a data dir are owner-only from the moment they exist (daemon/README.md §0), under
the usual umask 022: the HTTPS certificate, spark-load's staged files and rejects, spark.log.
(They used to be created 0644 and tightened at the daemon's next start.)"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbctl.core import certs, layout
from sbctl.core.records import StagedRecord
from sbctl.spark import session, stage


@pytest.fixture(autouse=True)
def usual_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path | str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_the_certificate_and_its_key_are_created_owner_only(tmp_path: Path) -> None:
    cert, key = certs.ensure_certificate(tmp_path)
    assert (mode(cert), mode(key)) == (0o600, 0o600)


def test_staged_files_are_created_owner_only(tmp_path: Path) -> None:
    files = stage._PartitionFiles(str(tmp_path), 0, 7)
    files.add(StagedRecord(b"payload", -1, -1))
    files.flush()
    (staged,) = Path(files.directory).iterdir()
    assert mode(staged) == 0o600 and mode(files.directory) == 0o700
    files.close_file()
    assert files.done == [(0, str(staged), 1, staged.stat().st_size)]  # (its path, for adopt)


def test_spark_log_is_created_owner_only(tmp_path: Path) -> None:
    log = layout.spark_log(tmp_path)
    fh = session._open_log(log, "app", "local[1]")
    fh.close()
    assert mode(log) == 0o600


def test_open_private_appends_and_truncates(tmp_path: Path) -> None:
    path = tmp_path / "f"
    with layout.open_private(path) as fh:
        assert fh.name == str(path)
        fh.write(b"ab")
    with layout.open_private(path, append=True) as fh:
        fh.write(b"c")
    assert path.read_bytes() == b"abc" and mode(path) == 0o600
    with layout.open_private(path) as fh:
        fh.write(b"d")
    assert path.read_bytes() == b"d"
