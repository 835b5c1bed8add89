"""The WebSocket framing under AMQP over WebSocket (sbctld.frontends.http.websocket)."""

from __future__ import annotations

import os
import struct

import pytest

from sbctld.frontends.http import websocket as ws


def client_frame(
    opcode: int, payload: bytes, fin: bool = True, mask: bytes = b"\x01\x02\x03\x04"
) -> bytes:
    n = len(payload)
    first = (0x80 if fin else 0) | opcode
    if n < 126:
        head = struct.pack("!BB", first, 0x80 | n)
    elif n < 1 << 16:
        head = struct.pack("!BBH", first, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", first, 0x80 | 127, n)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return head + mask + masked


@pytest.mark.parametrize("size", [0, 1, 125, 126, 65535, 65536, 200_000])
def test_every_length_encoding_reads_back_byte_for_byte_in_any_chunking(size: int) -> None:
    payload = os.urandom(size)
    data = client_frame(ws.BINARY, payload) + client_frame(ws.PING, b"hi")
    reader = ws.FrameReader()
    got = []
    for i in range(0, len(data), 997):  # arbitrary chunks, splitting headers too
        got += reader.feed(data[i : i + 997])
    assert got == [(ws.BINARY, payload), (ws.PING, b"hi")]
    assert reader.buf == bytearray()


def test_server_frames_are_unmasked_with_the_shortest_length() -> None:
    assert ws.frame(ws.BINARY, b"abc") == b"\x82\x03abc"
    assert ws.frame(ws.BINARY, b"x" * 126)[:4] == b"\x82\x7e\x00\x7e"
    assert ws.frame(ws.BINARY, b"x" * 65536)[:10] == b"\x82\x7f" + struct.pack("!Q", 65536)


def test_unmasked_reserved_long_control_and_huge_frames_are_refused() -> None:
    with pytest.raises(ws.FrameError, match="masked"):
        ws.FrameReader().feed(b"\x82\x03abc")
    with pytest.raises(ws.FrameError, match="reserved"):
        ws.FrameReader().feed(b"\xc2\x80" + b"\0" * 4)
    with pytest.raises(ws.FrameError, match="control"):
        ws.FrameReader().feed(client_frame(ws.PING, b"x" * 126))
    with pytest.raises(ws.FrameError, match="control"):
        ws.FrameReader().feed(client_frame(ws.CLOSE, b"", fin=False))
    with pytest.raises(ws.FrameError) as err:
        ws.FrameReader().feed(b"\x82\xff" + struct.pack("!Q", ws.MAX_FRAME + 1))
    assert err.value.code == ws.TOO_BIG


def test_the_handshake_answer_and_its_refusals() -> None:
    headers = {
        "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
        "sec-websocket-version": "13",
        "sec-websocket-protocol": "AMQPWSB10",
    }
    assert ws.handshake_error(headers) is None
    assert ("Sec-WebSocket-Accept", "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=") in ws.accept_headers(headers)
    assert ("Sec-WebSocket-Protocol", "AMQPWSB10") in ws.accept_headers(headers)
    assert "Version: 13" in (ws.handshake_error({**headers, "sec-websocket-version": "8"}) or "")
    assert "Key" in (ws.handshake_error({**headers, "sec-websocket-key": ""}) or "")
    assert "AMQPWSB10" in (ws.handshake_error({**headers, "sec-websocket-protocol": "mqtt"}) or "")
    assert ws.requested("GET", "/$servicebus/websocket", {"upgrade": "websocket"})
    assert not ws.requested("GET", "/$servicebus/websocket", {})
    assert not ws.requested("PUT", "/$servicebus/websocket", {"upgrade": "websocket"})
