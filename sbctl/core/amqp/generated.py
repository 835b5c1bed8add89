"""Encoders generated per composite class (AMQP 1.0 §1.4: a described list).

A composite's encoder writes what ``Composite.to_list`` then the list encoder would, straight
from the attributes: no typed list, and no type dispatch for fields of a declared type.
The generated code names only the class's own field names (from the specs in
:mod:`.types`), never anything a peer sent.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from sbctl.core.amqp.types import WRAP, Composite, _fields, _symbols

Encoder = Callable[[Any, bytearray], None]


def composite_encoder(
    cls: type[Composite],
    encoders: dict[type, Encoder],
    other: Encoder,
    compound: Callable[[int, int, int, bytearray, bytearray], None],
    enc_map: Encoder,
) -> Encoder:
    """The encoder of ``cls``; ``encoders`` by Python type, ``other`` for the rest,
    ``compound`` writes a list's header and body, ``enc_map`` a map."""
    code = cls.CODE
    head = b"\x00\x53" + bytes((code,)) if code < 256 else b"\x00\x80" + struct.pack(">Q", code)
    env: dict[str, Any] = {
        "HEAD": head,
        "COMPOUND": compound,
        "DISPATCH": encoders.get,
        "OTHER": other,
        "ENC_MAP": enc_map,
    }
    lines = ["def enc(v, out):", "    out += HEAD"]
    lines.append("    b = bytearray()" if cls.FIELDS else "    out.append(0x45)")
    for i, (name, kind) in enumerate(cls.FIELDS):
        lines += [f"    x = v.{name}", "    if x is None:", "        b.append(0x40)", "    else:"]
        if kind == "symbols":
            env[f"W{i}"] = _symbols
            lines += [f"        x = W{i}(x)", "        DISPATCH(type(x), OTHER)(x, b)"]
        elif kind == "fields":
            env[f"W{i}"] = _fields
            lines.append(f"        ENC_MAP(W{i}(x), b)")
        elif WRAP.get(kind) is None:
            lines.append("        DISPATCH(type(x), OTHER)(x, b)")
        else:
            env[f"W{i}"] = WRAP[kind]
            env[f"E{i}"] = encoders[WRAP[kind]]
            lines.append(f"        E{i}(x if type(x) is W{i} else W{i}(x), b)")
    if cls.FIELDS:
        lines.append(f"    COMPOUND(0xC0, 0xD0, {len(cls.FIELDS)}, b, out)")
    exec("\n".join(lines) + "\n", env)
    encoder: Encoder = env["enc"]
    return encoder
