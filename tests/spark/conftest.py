"""What every Spark test needs: pyspark and a Java runtime.

Where either is missing the Spark tests are skipped on a developer's machine, but FAIL in
CI (``CI=true``), where a missing prerequisite must not pass as green.
"""

from __future__ import annotations

import os
import shutil

import pytest


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def missing_prerequisite() -> str | None:
    """Why the Spark tests cannot run here (None: they can)."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (pip install -e '.[spark]')"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no Java runtime: Spark needs java on PATH or JAVA_HOME"
    return None


@pytest.fixture(autouse=True, scope="session")
def spark_prerequisites() -> None:
    reason = missing_prerequisite()
    if reason is None:
        return
    if in_ci():
        pytest.fail(f"CI=true and the Spark tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)
