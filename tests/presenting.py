"""A broker whose results read as the Unix socket answers them.

The domain returns typed results (sbctld.results); the tests that assert on what a broker
operation answers assert on the form the CLI and the client see, so they call the broker
through :class:`Presented`, which passes every result through the Unix front-end's
presentation (sbctld.frontends.unix.present). A test module opts in by importing the
fixtures: ``from presenting import broker, open_broker, reopen``; they wrap conftest's.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sbctld.broker import Broker
from sbctld.frontends.unix.present import present

# What the broker holds whose methods' results are presented too: its pairings, and its
# concern objects (sbctld.broker: ``broker.messaging.send(...)``).
WRAPPED = frozenset({"pairings", "management", "messaging", "housekeeping", "time_travel"})


class Presented:
    """Everything of the broker, its methods' results, its pairings' and its concerns'
    presented."""

    def __init__(self, target: Any) -> None:
        object.__setattr__(self, "_target", target)

    @property
    def raw(self) -> Any:
        """The wrapped object itself (for code that wants the typed results)."""
        return self._target

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if name in WRAPPED:
            return Presented(value)
        if callable(value) and not isinstance(value, type) and not name.startswith("_"):

            def call(*args: Any, **kwargs: Any) -> Any:
                return present(value(*args, **kwargs))

            return call
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)

    def __delattr__(self, name: str) -> None:
        delattr(self._target, name)


def presented(b: Broker) -> Any:
    return Presented(b)


@pytest.fixture
def broker(broker: Broker) -> Iterator[Any]:
    yield Presented(broker)


@pytest.fixture
def reopen(reopen: Callable[..., Broker]) -> Callable[..., Any]:
    return lambda **kw: Presented(reopen(**kw))


@pytest.fixture
def open_broker(open_broker: Callable[[], Broker]) -> Callable[[], Any]:
    return lambda: Presented(open_broker())
