"""spark-load and spark-export: bulk data in and out of the emulator through PySpark.

This package talks to the daemon only through the public client and writes data
only with the shared batch codec (:mod:`sbctl.core.records`); it never imports daemon internals.
PySpark is an optional extra: :func:`require_pyspark` explains how to get it.
"""

from __future__ import annotations

import shlex
import sys

from sbctl.core.errors import GeneralError

# The distribution is `sbctl-emulator` (`sbctl` on PyPI is an unrelated project), and it is
# installed from a checkout, so the hint names commands that work from here.
INSTALL_HINT = (
    "PySpark is not installed for {python}: install it into that environment with "
    "`{python} -m pip install 'pyspark>=3.5'` (or run `pip install -e '.[spark]'` in the "
    "sbctl checkout); Spark also needs a Java 17 runtime, e.g. "
    "`apt-get install openjdk-17-jre-headless`"
)


def install_hint() -> str:
    return INSTALL_HINT.format(python=shlex.quote(sys.executable or "python3"))


def require_pyspark() -> None:
    """Raise a one-line GeneralError with install instructions when pyspark is missing."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise GeneralError(install_hint()) from None
