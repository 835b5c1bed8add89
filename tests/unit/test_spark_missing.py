"""Without pyspark, spark-load and spark-export say how to install it into their Python."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Loaded by Python at start-up (site imports sitecustomize): `import pyspark` then fails
# as it does where the package is not installed.
HIDE_PYSPARK = """
import sys

class _Hide:
    def find_spec(self, name, path=None, target=None):
        if name == "pyspark" or name.startswith("pyspark."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _Hide())
"""


@pytest.mark.parametrize(
    "args",
    [
        ["spark-load", "data/sample_messages.jsonl", "--entity", "q"],
        ["spark-export", "q", "--to", "/tmp/nowhere"],
    ],
)
def test_without_pyspark_the_command_explains_the_install(tmp_path: Path, args: list[str]) -> None:
    (tmp_path / "sitecustomize.py").write_text(HIDE_PYSPARK)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SBCTL_")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    env["SBCTL_SOCKET"] = str(tmp_path / "no.sock")
    proc = subprocess.run(
        [sys.executable, "-m", "sbctl.cli.app", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 1, proc
    # What works from this repository: pyspark into the same Python, or the checkout's extra
    # (`sbctl` on PyPI is an unrelated project: the hint never names it).
    assert f"{sys.executable} -m pip install 'pyspark>=3.5'" in proc.stderr
    assert "pip install -e '.[spark]'" in proc.stderr
    assert "sbctl[spark]" not in proc.stderr
    assert proc.stderr.count("\n") == 1, "one line, no traceback"


@pytest.mark.parametrize("missing", ["pyspark", "java"])
@pytest.mark.parametrize("ci", [True, False])
def test_spark_tests_fail_in_ci_and_skip_elsewhere_without_prerequisites(
    tmp_path: Path, missing: str, ci: bool
) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "JAVA_HOME")}
    env["PYTHONPATH"] = os.pathsep.join(
        [*([str(tmp_path)] if missing == "pyspark" else []), str(ROOT), str(ROOT / "daemon")]
    )
    if missing == "pyspark":
        (tmp_path / "sitecustomize.py").write_text(HIDE_PYSPARK)
    else:
        env["PATH"] = str(tmp_path)  # no java on it (python is run by its absolute path)
    if ci:
        env["CI"] = "true"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "addopts=",
            "tests/spark/test_partition_agreement.py",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    why = "pyspark is not installed" if missing == "pyspark" else "no Java runtime"
    if ci:
        assert proc.returncode == 1, proc.stdout
        assert f"CI=true and the Spark tests cannot run: {why}" in proc.stdout
        assert " passed" not in proc.stdout and " skipped" not in proc.stdout
    else:
        assert proc.returncode == 0, proc.stdout
        assert " skipped" in proc.stdout and " passed" not in proc.stdout, proc.stdout
