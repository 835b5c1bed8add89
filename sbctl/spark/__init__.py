"""spark-load and spark-export: bulk data in and out of the emulator through PySpark.

STYLE 12: this package talks to the daemon only through the public client and writes data
only with the shared batch codec (:mod:`sbctl.codec`); it never imports daemon internals.
PySpark is an optional extra: :func:`require_pyspark` explains how to get it.
"""

from __future__ import annotations

from sbctl.errors import GeneralError

INSTALL_HINT = (
    "PySpark is not installed: install the spark extra with `pip install 'sbctl[spark]'` "
    "(it also needs a Java 17 runtime, e.g. `apt-get install openjdk-17-jre-headless`)"
)


def require_pyspark() -> None:
    """Raise a one-line GeneralError with install instructions when pyspark is missing."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise GeneralError(INSTALL_HINT) from None
