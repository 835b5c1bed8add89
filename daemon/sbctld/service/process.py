"""The daemon process's own figures: memory and CPU, for status and namespace metrics.

psutil is imported on the first call: it slows start-up.
"""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger("sbctld")


class ProcessStats:
    def __init__(self) -> None:
        self._proc: Any = None  # psutil.Process, made on the first call

    def read(self) -> dict[str, Any]:
        """``rss_bytes``, ``cpu_seconds``, ``cpu_percent``; empty when unavailable."""
        import psutil

        try:
            if self._proc is None:
                self._proc = psutil.Process()
            proc = self._proc
            return {
                "rss_bytes": proc.memory_info().rss,
                # User + system time of every thread, from the process CPU clock: exact to
                # the nanosecond, where psutil's cpu_times() advances in 10 ms ticks (too
                # coarse for the CPU per message a bench divides out of it).
                "cpu_seconds": round(time.process_time(), 6),
                "cpu_percent": proc.cpu_percent(interval=None),
            }
        except (psutil.Error, OSError) as exc:
            log.warning("process statistics unavailable: %s", exc)
            return {}
