"""The client's retry policy (daemon/README.md §16.4-16.5), I/O-free: it only says how long to wait.

Like the SDKs: exponential back-off with jitter, 3 retries, 0.8 s base, 60 s cap. Only
transient errors (:attr:`SbctlError.transient`: ServerBusy, ServiceTimeout,
ServiceCommunicationProblem) are retried, and a ServerBusy waits at least the
``retry_after`` the daemon names (the time to its next credit period).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from sbctl.core.errors import SbctlError

DEFAULT_TOTAL = 3
DEFAULT_BACKOFF = 0.8
DEFAULT_MAX = 60.0


@dataclass(frozen=True)
class RetryPolicy:
    total: int = DEFAULT_TOTAL  # retries after the first attempt; 0: no retries
    backoff: float = DEFAULT_BACKOFF  # seconds; attempt n waits about backoff * 2**n
    max_backoff: float = DEFAULT_MAX
    jitter: float = 0.2  # +- this fraction of the back-off, drawn at random
    rng: random.Random = field(default_factory=random.Random, compare=False, repr=False)

    def delay(self, error: SbctlError, attempt: int) -> float | None:
        """Seconds to wait before retry number ``attempt + 1`` (``attempt`` retries made
        so far), or None when ``error`` must be raised."""
        if not error.transient or attempt >= self.total:
            return None
        wait = self.backoff * (2**attempt)
        wait *= 1 + self.jitter * (2 * self.rng.random() - 1)
        wait = min(wait, self.max_backoff)
        if error.retry_after is not None:
            wait = max(wait, error.retry_after)
        return max(0.0, wait)


NO_RETRY = RetryPolicy(total=0)
