"""Throttling (daemon/README.md §0.2, §0.4.4, §20): one :class:`CreditMeter` per namespace.

Pure: it reads time only as the ``now`` (ms) its caller passes from the broker's injected
clock. A period is one second of that clock (``now // 1000``); at the start of each period
the meter holds ``limit`` credits again.

- Basic/Standard: ``limit`` is the namespace's ``credits_per_second`` (0: unlimited).
- Premium has no credit quota (daemon/README.md §0.2.4): the same meter stands for what its
messaging
  units can carry, ``capacity * ops_per_unit`` operations per second (an emulator
  figure, settable per namespace; :data:`DEFAULT_OPS_PER_UNIT`).

A request is admitted whole or refused whole (daemon/README.md §0.4.4): :meth:`CreditMeter.charge`
raises before the caller applies anything.
"""

from __future__ import annotations

from typing import Any

from sbctl.core.errors import QuotaExceeded, ServerBusy

PERIOD_MS = 1000
DEFAULT_CREDITS_PER_SECOND = 1000  # daemon/README.md §0.2.1
DEFAULT_OPS_PER_UNIT = 2000  # emulated capacity of one premium messaging unit (ops/s)
DATA_COST = 1  # per message sent, received or peeked
MANAGEMENT_COST = 10  # per create/read/update/delete of an entity
KINDS = ("data", "management", "filter")
THROTTLED_TEXT = (
    "The request was terminated because the entity is being throttled. "
    "Error code: 50009. Please wait 2 seconds and try again."
)


class CreditQuotaExceeded(QuotaExceeded):
    """A request costing more than a whole period's credits (daemon/README.md §0.4.4): the caller's
    mistake, not the entity's state (pairing does not fail over on it)."""


class CreditMeter:
    def __init__(self, limit: int, *, premium: bool = False) -> None:
        self.limit = limit  # credits (or premium operations) per period; 0: unlimited
        self.premium = premium
        self.period = -1
        self.used = 0  # in the current period
        self.last_period_used: dict[str, int] = dict.fromkeys(KINDS, 0)
        self.period_used: dict[str, int] = dict.fromkeys(KINDS, 0)
        self.total: dict[str, int] = dict.fromkeys(KINDS, 0)
        self.throttled = 0
        self.served = 0

    def _roll(self, now: int) -> None:
        period = now // PERIOD_MS
        if period != self.period:
            self.last_period_used = (
                self.period_used if period == self.period + 1 else dict.fromkeys(KINDS, 0)
            )
            self.period_used = dict.fromkeys(KINDS, 0)
            self.period = period
            self.used = 0

    def remaining(self, now: int) -> int | None:
        """Credits left in this period; None when unlimited."""
        self._roll(now)
        return None if self.limit <= 0 else max(0, self.limit - self.used)

    def _refuse(self, now: int) -> ServerBusy:
        self.throttled += 1
        wait = ((now // PERIOD_MS) + 1) * PERIOD_MS - now
        return ServerBusy(THROTTLED_TEXT, retry_after=wait / 1000)

    def check(self, cost: int, now: int) -> None:
        """Raise (counting a throttled request) unless ``cost`` fits; charges nothing."""
        self._roll(now)
        if self.limit <= 0 or cost <= 0:
            return
        if cost > self.limit:
            what = "operations per second" if self.premium else "credits per second"
            raise CreditQuotaExceeded(
                f"the request costs {cost} credits, more than the namespace's {self.limit} "
                f"{what}: it can never be admitted"
            )
        if cost > self.limit - self.used:
            raise self._refuse(now)

    def charge(self, kind: str, cost: int, now: int) -> None:
        """Admit a request costing ``cost`` whole, or raise ServerBusy / QuotaExceeded."""
        self.check(cost, now)
        self.record(kind, cost, now)

    def record(self, kind: str, cost: int, now: int) -> None:
        """Count ``cost`` as consumed (after :meth:`check`, or for what a receive returned)."""
        self._roll(now)
        self.used += cost
        self.period_used[kind] += cost
        self.total[kind] += cost
        self.served += 1

    def admit_count(self, wanted: int, now: int) -> int:
        """How many messages a receive or peek may return: refused when none are left."""
        left = self.remaining(now)
        if left is None:
            return wanted
        if left <= 0:
            raise self._refuse(now)
        return min(wanted, left)

    def snapshot(self, now: int) -> dict[str, Any]:
        self._roll(now)
        left = None if self.limit <= 0 else max(0, self.limit - self.used)
        return {
            "remaining": left,
            "period_ms_left": PERIOD_MS - now % PERIOD_MS,
            "consumed": {
                "this_period": dict(self.period_used),
                "last_period": dict(self.last_period_used),
                "since_start": dict(self.total),
            },
            "throttled_requests": self.throttled,
            "requests_served": self.served,
        }
