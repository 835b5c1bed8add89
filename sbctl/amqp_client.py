"""A lean asyncio AMQP 1.0 client for measuring the daemon's AMQP endpoint (``sbctl bench
--amqp``): SASL, pipelined open and begin, a ``$cbs`` put-token, sender and receiver links,
batch transfers (message format 0x80013700, as the SDKs send a message batch) and range
dispositions (one ``first..last`` disposition settles a whole batch of deliveries, as a
batching client does).

It speaks through the daemon's own codec (``sbctld.frontends.amqp``: both sides are one
installed distribution, as ``sbctl namespace sas-token`` already uses the daemon's token
code), so a codec fix is a fix for both. It is a measuring tool, not an SDK: one session per
connection, no reconnects, errors raise :class:`AmqpClientError`.
"""

from __future__ import annotations

import asyncio
import time
import uuid

from sbctl.core.amqp import codec, framing
from sbctl.core.amqp import types as t
from sbctl.core.sas import make_token

MAX_FRAME = 1 << 20
WINDOW = 1 << 20
PUT_TOKEN_TYPE = "servicebus.windows.net:sastoken"


class AmqpClientError(Exception):
    pass


class AmqpClient:
    """One connection with one session (channel 0)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.buf = bytearray()
        self.handles = 0
        self.next_delivery_id = 0
        self.next_incoming_id = 0
        self.peer_max_frame = 512
        self.credit: dict[int, int] = {}  # by our handle
        self.ours: dict[int, int] = {}  # the daemon's handle -> ours
        self.delivered: dict[int, int] = {}  # a receiver link's delivery count, by our handle

    # ------------------------------------------------------------ wire

    @classmethod
    async def connect(
        cls, host: str, port: int, *, mechanism: str = "ANONYMOUS", timeout: float = 30
    ) -> AmqpClient:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        client = cls(reader, writer)
        try:
            await asyncio.wait_for(client._handshake(mechanism), timeout)
        except BaseException:
            writer.close()
            raise
        return client

    async def _handshake(self, mechanism: str) -> None:
        self.writer.write(framing.PROTOCOL_SASL)
        if await self._exact(8) != framing.PROTOCOL_SASL:
            raise AmqpClientError("the peer does not speak AMQP over SASL")
        mechanisms = (await self.frame()).body
        if mechanism not in (mechanisms.sasl_server_mechanisms or ()):
            raise AmqpClientError(f"the peer does not offer SASL {mechanism}")
        # Pipelined, as the SDKs do: the AMQP header, open and begin right after sasl-init.
        self.writer.write(
            framing.encode_frame(
                0, t.SaslInit(t.Symbol(mechanism), b"", "localhost"), kind=framing.SASL_FRAME
            )
            + framing.PROTOCOL_AMQP
            + framing.encode_frame(0, t.Open(f"bench-{uuid.uuid4()}", "localhost", MAX_FRAME))
            + framing.encode_frame(0, t.Begin(None, 0, WINDOW, WINDOW, 1024))
        )
        outcome = (await self.frame()).body
        if not isinstance(outcome, t.SaslOutcome) or outcome.code != 0:
            raise AmqpClientError(f"SASL {mechanism} refused")
        if await self._exact(8) != framing.PROTOCOL_AMQP:
            raise AmqpClientError("the peer did not answer the AMQP header")
        opened = (await self.frame()).body
        if not isinstance(opened, t.Open):
            raise AmqpClientError(f"expected open, got {opened!r}")
        self.peer_max_frame = int(opened.max_frame_size or MAX_FRAME)
        begun = (await self.frame()).body
        if not isinstance(begun, t.Begin):
            raise AmqpClientError(f"expected begin, got {begun!r}")
        self.next_incoming_id = int(begun.next_outgoing_id or 0)

    async def _exact(self, n: int) -> bytes:
        while len(self.buf) < n:
            await self._read()
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    async def _read(self) -> None:
        chunk = await self.reader.read(1 << 20)
        if not chunk:
            raise AmqpClientError("the daemon closed the AMQP connection")
        self.buf += chunk

    async def frame(self) -> framing.Frame:
        """The next frame that is not a heartbeat; transfers count against our window,
        flows update link credit, a close or a detach raises."""
        while True:
            got = framing.parse_frame(self.buf, 0, 1 << 26)
            if got is None:
                await self._read()
                continue
            frame, end = got
            del self.buf[:end]
            body = frame.body
            if body is None:
                continue
            if isinstance(body, t.Transfer):
                self.next_incoming_id += 1
            elif isinstance(body, t.Flow) and body.handle is not None:
                ours = self.ours.get(int(body.handle))
                if ours is not None:
                    self.credit[ours] = int(body.link_credit or 0)
            elif isinstance(body, t.Close | t.Detach | t.End) and getattr(body, "error", None):
                raise AmqpClientError(f"{body.NAME}: {body.error.description}")
            return frame

    def send(self, performative: t.Composite, payload: bytes = b"") -> None:
        if payload and len(payload) + 64 > self.peer_max_frame:
            for chunk in framing.transfer_frames(0, performative, payload, self.peer_max_frame):
                self.writer.write(chunk)
        else:
            self.writer.write(framing.encode_frame(0, performative, payload))

    async def drain(self) -> None:
        await self.writer.drain()

    def close(self) -> None:
        if not self.writer.is_closing():
            self.writer.write(framing.encode_frame(0, t.Close()))
            self.writer.close()

    # ------------------------------------------------------------ links

    async def attach(self, role: bool, address: str, *, snd_settle_mode: int = 0) -> int:
        """Attach a link (``role`` True: we receive from ``address``); returns its handle
        once the daemon answered the attach."""
        self.handles += 1
        handle = self.handles
        name = f"bench-{handle}-{uuid.uuid4()}"
        source = t.Source(address) if role else t.Source(f"bench-src-{handle}")
        target = t.Target(f"bench-tgt-{handle}") if role else t.Target(address)
        self.send(
            t.Attach(
                name,
                handle,
                role,
                snd_settle_mode,
                0,
                source,
                target,
                None,
                None,
                None if role else 0,
            )
        )
        while True:
            body = (await self.frame()).body
            if isinstance(body, t.Attach) and body.name == name:
                self.ours[int(body.handle)] = handle
                if (body.source if role else body.target) is None:
                    detach = (await self.frame()).body
                    raise AmqpClientError(f"attach to {address} refused: {detach!r}")
                return handle

    async def put_token(self, audience: str, key_name: str, key: str, ttl_s: int = 3600) -> None:
        """A CBS put-token for ``audience`` signed with the namespace key (202 or raise)."""
        tx = await self.attach(False, "$cbs")
        rx = await self.attach(True, "$cbs")
        self.send(t.Flow(self.next_incoming_id, WINDOW, self.next_delivery_id, WINDOW, rx, 0, 1))
        expiry = int(time.time()) + ttl_s
        request = codec.Message(
            properties=t.Properties(str(uuid.uuid4()), None, None, None, "cbs"),
            application_properties={
                "operation": "put-token",
                "type": PUT_TOKEN_TYPE,
                "name": audience,
                "expiration": t.Timestamp(expiry * 1000),
            },
            body=make_token(audience, key_name, key, expiry),
            body_kind="value",
        )
        await self._credit(tx)
        self._transfer(tx, codec.encode_message(request), settled=True)
        while True:
            frame = await self.frame()
            if isinstance(frame.body, t.Transfer) and self.ours.get(frame.body.handle) == rx:
                reply = codec.decode_message(frame.payload)
                status = (reply.application_properties or {}).get("status-code")
                if status not in (200, 202):
                    raise AmqpClientError(f"put-token answered {status}")
                return

    async def _credit(self, handle: int) -> None:
        while self.credit.get(handle, 0) <= 0:
            await self.frame()

    def _transfer(
        self, handle: int, payload: bytes, *, settled: bool, message_format: int = 0
    ) -> int:
        delivery_id = self.next_delivery_id
        self.next_delivery_id += 1
        self.credit[handle] = self.credit.get(handle, 0) - 1
        tag = delivery_id.to_bytes(8, "big")
        self.send(t.Transfer(handle, delivery_id, tag, message_format, settled), payload)
        return delivery_id

    # ------------------------------------------------------------ messages

    async def send_batch(self, handle: int, payload: bytes) -> None:
        """One batch transfer (``payload`` from :func:`batch_payload`), unsettled; returns
        when the daemon accepted it (after its group commit)."""
        await self._credit(handle)
        delivery_id = self._transfer(
            handle, payload, settled=False, message_format=codec.BATCH_FORMAT
        )
        await self._outcome(delivery_id, delivery_id)

    async def _outcome(self, first: int, last: int) -> None:
        """Wait until the daemon settled every delivery in ``first..last``, each accepted."""
        pending = set(range(first, last + 1))
        while pending:
            body = (await self.frame()).body
            if isinstance(body, t.Disposition):
                lo = int(body.first)
                hi = lo if body.last is None else int(body.last)
                if not isinstance(body.state, t.Accepted):
                    raise AmqpClientError(f"deliveries {lo}..{hi} not accepted: {body.state!r}")
                pending.difference_update(range(lo, hi + 1))

    def flow(self, handle: int, credit: int) -> None:
        self.send(
            t.Flow(
                self.next_incoming_id,
                WINDOW,
                self.next_delivery_id,
                WINDOW,
                handle,
                self.delivered.get(handle, 0),
                credit,
            )
        )

    async def receive(self, handle: int, count: int) -> list[tuple[int, bytes]]:
        """Grant ``count`` credit and collect that many deliveries: (delivery id, message
        bytes), multi-frame deliveries joined."""
        self.flow(handle, count)
        got: list[tuple[int, bytes]] = []
        parts: list[bytes] = []
        first_id = 0
        while len(got) < count:
            frame = await self.frame()
            body = frame.body
            if not isinstance(body, t.Transfer) or self.ours.get(body.handle) != handle:
                continue
            if not parts:
                first_id = int(body.delivery_id)
            parts.append(frame.payload)
            if not body.more:
                got.append((first_id, b"".join(parts)))
                parts = []
        self.delivered[handle] = self.delivered.get(handle, 0) + len(got)
        return got

    async def complete(self, first: int, last: int) -> None:
        """Accept deliveries ``first..last`` with one disposition (unsettled: wait for the
        daemon's answer, which comes after its group commit)."""
        self.send(t.Disposition(True, first, last, False, t.Accepted()))
        await self._outcome(first, last)


def batch_payload(bodies: list[bytes]) -> bytes:
    """A batch transfer's payload: one data section per encoded message (format 0x80013700)."""
    batch = codec.Message(body=[codec.encode_message(codec.Message(body=[b])) for b in bodies])
    return codec.encode_message(batch)
