"""A failed Spark job as one line: the Python (or Java) cause, not Spark's stack traces.

Spark reports a failure in a Python worker as a Java exception whose text holds the
worker's Python traceback, wrapped in the Java stack trace of every layer it went through
(forty lines or more). Users need the last line of the Python traceback, plus what to do
when the workers' Python lacks a module; ``SBCTL_DEBUG=1`` prints the whole text first.
"""

from __future__ import annotations

import os
import re
import sys

from sbctl.core.errors import GeneralError, SbctlError

# What a Spark task of spark-load or spark-export imports besides sbctl's own code (which
# sbctl ships with the job on a cluster) and pyspark (which Spark puts on the path).
WORKER_LIBRARIES = ("msgspec", "crc32c", "xxhash")

_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*)(: .*)?$")
_JAVA_CAUSE = re.compile(r"^Caused by: (.+)$")


def python_cause(text: str) -> str | None:
    """The exception line of the last Python traceback in ``text`` (None: there is none)."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip().startswith("Traceback (most")]
    if not starts:
        return None
    for line in lines[starts[-1] + 1 :]:
        if not line or line[0].isspace():
            continue  # a frame, its source line or its ^^^ markers
        if _EXCEPTION_LINE.match(line.strip()):
            return line.strip()
    return None


def cause(exc: BaseException) -> str:
    """The most useful single line of ``exc``: the Python cause, else the deepest Java cause,
    else the first line of its text."""
    text = str(exc)
    found = python_cause(text)
    if found:
        return found
    java = [m.group(1) for line in text.splitlines() if (m := _JAVA_CAUSE.match(line.strip()))]
    if java:
        return java[-1].strip()
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(": ") and len(line) > 2:  # py4j: "An error occurred ...\n: <java>"
            return line[2:]
    first = text.strip().splitlines()
    return first[0] if first else type(exc).__name__


def job_failed(exc: BaseException, python: str, log: str | None) -> SbctlError:
    """The one-line error for a Spark job that raised ``exc``; ``python``: the workers'
    interpreter; ``log``: where the JVM's own output went (None: the terminal)."""
    if isinstance(exc, SbctlError):
        return exc
    text = str(exc)
    if os.environ.get("SBCTL_DEBUG"):
        java = getattr(exc, "_stackTrace", None)  # pyspark's captured JVM exceptions
        more = f"JVM stack trace:\n{java}\n" if java and str(java) not in text else ""
        sys.stderr.write(f"{type(exc).__name__}: {text}\n{more}")
    line = cause(exc)
    hint = ""
    if "Cannot run program" in text and python in text:
        line = f"Spark could not start Python {python!r} for its tasks"
        hint = (
            ": give the executors' Python with --spark-conf spark.pyspark.python=PATH "
            f"(it needs {', '.join(WORKER_LIBRARIES)})"
        )
    elif line.startswith(("ModuleNotFoundError", "ImportError")):
        hint = (
            f" (Spark's Python workers run {python}; they need "
            f"{', '.join(WORKER_LIBRARIES)}: install them there, or give another Python with "
            "--spark-conf spark.pyspark.python=PATH)"
        )
    more = "SBCTL_DEBUG=1 shows the Spark trace" + (f"; Spark's log: {log}" if log else "")
    return GeneralError(f"the Spark job failed: {line}{hint} ({more})")
