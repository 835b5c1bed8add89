"""A peeked or received message as the broker hands it out: its broker-owned facts and its
stored payload, untouched.

The domain builds it, the service passes it on, each front-end renders it in its own wire
form: AMQP and the Unix socket send the stored message with the broker's facts spliced in
(sbctl.core.splice; the Unix client decodes it with sbctl.core.message_form), HTTP decodes
it at its edge.
"""

from __future__ import annotations

from typing import Any

import msgspec


class Delivered(msgspec.Struct, array_like=True):
    """A peeked or received message as it travels back to the client."""

    sequence_number: int
    enqueued_time_ms: int
    delivery_count: int
    lock_token: str | None
    locked_until_ms: int | None
    expires_at_ms: int
    partition_id: int | None
    state: int
    payload: bytes  # the stored form (sbctl.core.message_form); spliced when sent
    changes: dict[str, Any] | None = None
