"""A failed Spark job is reported by its cause, in one line (no pyspark needed)."""

from __future__ import annotations

import pytest

from sbctl.cli.exit_codes import exit_status
from sbctl.spark.failures import cause, job_failed

PYTHON_IN_JAVA = """An exception was thrown from the Python worker:
Traceback (most recent call last):
  File "/spark/python/lib/pyspark.zip/pyspark/worker.py", line 4197, in invoke_udf
    func, profiler, deserializer, serializer = read_command(pickleSer, init_info.udf_info)
                                               ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/tmp/userFiles/sbctl.zip/sbctl/spark/stage.py", line 23, in <module>
    import msgspec
ModuleNotFoundError: No module named 'msgspec'
 SQLSTATE: 38000
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(x)
\tat java.base/java.lang.Thread.run(Thread.java:840)
"""

CHAINED = """Traceback (most recent call last):
  File "a.py", line 1, in f
KeyError: 'x'

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "a.py", line 3, in f
ValueError: bad row 7
"""

JAVA_ONLY = """An error occurred while calling o81.collectToPython.
: org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 failed
\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(x)
Caused by: java.io.IOException: No space left on device
\tat java.base/java.io.FileOutputStream.writeBytes(Native Method)
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (PYTHON_IN_JAVA, "ModuleNotFoundError: No module named 'msgspec'"),
        (CHAINED, "ValueError: bad row 7"),
        (JAVA_ONLY, "java.io.IOException: No space left on device"),
        (
            "An error occurred while calling o1.x.\n: java.lang.OutOfMemoryError: heap\n\tat a",
            "java.lang.OutOfMemoryError: heap",
        ),
        ("", "RuntimeError"),
    ],
)
def test_cause_is_the_python_or_deepest_java_exception(text: str, expected: str) -> None:
    assert cause(RuntimeError(text)) == expected


def test_missing_module_names_the_python_and_what_it_needs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("SBCTL_DEBUG", raising=False)
    err = job_failed(RuntimeError(PYTHON_IN_JAVA), "/usr/bin/python3", "/d/spark.log")
    assert str(err) == (
        "the Spark job failed: ModuleNotFoundError: No module named 'msgspec' (Spark's Python "
        "workers run /usr/bin/python3; they need msgspec, crc32c, xxhash: install them there, "
        "or give another Python with --spark-conf spark.pyspark.python=PATH) (SBCTL_DEBUG=1 "
        "shows the Spark trace; Spark's log: /d/spark.log)"
    )
    assert exit_status(err) == 1 and capsys.readouterr().err == ""
    monkeypatch.setenv("SBCTL_DEBUG", "1")
    job_failed(RuntimeError(PYTHON_IN_JAVA), "/usr/bin/python3", None)
    assert "import msgspec" in capsys.readouterr().err


def test_a_python_that_cannot_start_says_which() -> None:
    text = 'java.io.IOException: Cannot run program "/opt/venv/bin/python": error=2'
    err = job_failed(RuntimeError(text), "/opt/venv/bin/python", None)
    assert str(err).startswith(
        "the Spark job failed: Spark could not start Python '/opt/venv/bin/python' for its "
        "tasks: give the executors' Python with --spark-conf spark.pyspark.python=PATH"
    )
