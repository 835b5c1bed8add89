"""Generate a JSON Lines message dataset for `sbctl send --input` and `sbctl spark-load`.

Every line is one message in the SDK's snake_case field names (the format `send --input`
reads and `spark-load` maps by default)::

    python data/generate.py --rows 1000000 --size 1024 --out /tmp/msgs.jsonl

``--keys K`` gives every row a PartitionKey out of K (0: keyless, round-robin); ``--sessions
S`` a SessionId out of S instead. The output is deterministic for a given ``--seed``.
Standard library only, so it runs anywhere.
"""

from __future__ import annotations

import argparse
import json
import random
import string
import sys
from pathlib import Path
from typing import Any

REGIONS = ("eu", "us", "ap")


def rows(count: int, size: int, keys: int, sessions: int, seed: int) -> Any:
    """The message objects, one per row; bodies are ``size`` ASCII characters."""
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits
    # One random block, sliced at a different offset per row: fast, and bodies differ.
    block = "".join(rng.choices(alphabet, k=size + 4096))
    for i in range(count):
        start = (i * 7919) % 4096
        row: dict[str, Any] = {"body": block[start : start + size], "message_id": f"m-{i}"}
        if sessions:
            row["session_id"] = f"session-{i % sessions}"
        elif keys:
            row["partition_key"] = f"customer-{i % keys}"
        row["application_properties"] = {"region": REGIONS[i % 3], "n": i}
        yield row


def write(path: Path | None, count: int, size: int, keys: int, sessions: int, seed: int) -> int:
    """Write the dataset (stdout when ``path`` is None); returns the bytes written."""
    out = sys.stdout if path is None else path.open("w", encoding="utf-8")
    written = 0
    try:
        dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
        chunk: list[str] = []
        for row in rows(count, size, keys, sessions, seed):
            chunk.append(dumps(row))
            if len(chunk) >= 10_000:
                text = "\n".join(chunk) + "\n"
                out.write(text)
                written += len(text)
                chunk = []
        if chunk:
            text = "\n".join(chunk) + "\n"
            out.write(text)
            written += len(text)
    finally:
        if path is not None:
            out.close()
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, required=True, help="number of messages")
    parser.add_argument("--size", type=int, default=1024, help="body size in bytes")
    parser.add_argument("--out", type=Path, help="output file (default: stdout)")
    parser.add_argument("--keys", type=int, default=1000, help="distinct partition keys")
    parser.add_argument("--sessions", type=int, default=0, help="distinct session ids")
    parser.add_argument("--seed", type=int, default=7, help="random seed")
    args = parser.parse_args(argv)
    if args.rows < 0 or args.size < 0:
        parser.error("--rows and --size must not be negative")
    write(args.out, args.rows, args.size, args.keys, args.sessions, args.seed)


if __name__ == "__main__":
    main()
