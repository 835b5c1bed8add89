"""``sbctl bench --targets``: the Unix-socket performance targets, each figure beside the
ceiling it is measured against (taken in the same run) and the ratio the target names.

- batches of 100: durable send rate / the disk's append+fdatasync rate at 100 records per
  sync (target at least 0.5);
- 32 concurrent single senders: send rate / the disk's single append+fdatasync rate (target
  at least 5: the group commit shares each sync among the waiting senders);
- receive + complete in batches of 100: messages per second (target at least 60,000);
- memory per stored message: a private daemon's RSS above idle with ``stored`` messages,
  per message (target at most 40 bytes).

Beside each throughput figure: the CPU per message its clients and the daemon spent
(``sbctl bench`` measures both) and the CPU per message the target leaves the two together,
given how the workload runs (:func:`cpu_budget`): when that budget is smaller than the
clients' CPU alone, no daemon can meet the target with this client on this machine. Beside
the 32 senders': what a round trip that does no work (a ping, from 32 connections as the
senders run) costs the clients and the daemon, before any send.

The AMQP targets are measured side by side with RabbitMQ by the harness the performance
guide names (sbctl/guides/performance.md), not here: it needs RabbitMQ installed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# (key, label, unit, ceiling key or None, target ratio or figure, at least?)
TARGETS = (
    ("batch100", "send, batches of 100", "msgs/s", "fsync100", 0.5, True),
    ("senders32", "send, 32 concurrent single senders", "msgs/s", "fsync1", 5.0, True),
    ("receive100", "receive + complete, batches of 100", "msgs/s", None, 60_000.0, True),
    ("stored_bytes", "daemon memory per stored message", "B", None, 40.0, False),
)
# Where each throughput target's CPU per message comes from: (the bench result, its phase).
CPU_OF = {
    "batch100": ("batched", "send"),
    "senders32": ("senders", "send"),
    "receive100": ("batched", "receive"),
}
CEILINGS = {
    "fsync100": "raw append + fdatasync, 100 records/sync",
    "fsync1": "raw append + fdatasync, 1 record/sync",
}


def cpu_budget(key: str, target: float, figures: dict[str, float], cpus: int) -> float | None:
    """The CPU per message (µs) that target ``key`` leaves the clients and the daemon
    together, from the ceilings measured in the same run:

    - batches of 100: one request in flight, so the client's work, the daemon's and the sync
      run one after another. At ``target`` x the ceiling a record may take 1/target of its
      share of the ceiling's append + fdatasync (which includes the daemon's write); the
      sync takes one share, the CPUs the rest: (1/target - 1) x 1e6 / fsync100.
    - 32 concurrent senders: the clients and the daemon share the machine's CPUs:
      cpus x 1e6 / (target x fsync1).
    - receive + complete in batches of 100: one request in flight; each complete waits
      for one sync of its batch: 1e6 / target - 1e6 / (100 x fsync1).

    0 when the syncs alone take longer than the target allows (a slow disk).
    """
    if key == "batch100":
        budget = (1 / target - 1) * 1e6 / figures["fsync100"]
    elif key == "senders32":
        budget = cpus * 1e6 / (target * figures["fsync1"])
    elif key == "receive100":
        budget = 1e6 / target - 1e6 / (100 * figures["fsync1"])
    else:
        return None
    return max(budget, 0.0)


def targets_bench(
    socket_path: Path | None,
    data_dir: Path | None,
    *,
    messages: int = 20_000,
    stored: int = 1_000_000,
) -> dict[str, Any]:
    """Run each workload against the running daemon (and a private one for memory)."""
    from sbctl.bench import ping_bench, run_bench, stored_bench

    # First: the private daemon is forked from this process, and after the workloads below
    # its heap would hold their freed memory, which the daemon's index then reuses without
    # growing (a 300,000-message fill once read 0.1 bytes a message).
    memory = stored_bench(stored, 1024, restarts=False)
    batched = run_bench(
        socket_path, messages=messages, batch=100, data_dir_for_raw=data_dir, skip_start=True
    )
    senders = run_bench(
        socket_path, messages=messages, clients=32, skip_raw=True, skip_start=True, receive=False
    )
    # The same round trips doing no work: what a request costs the clients and the daemon
    # before its operation, out of the 32 senders' budget.
    pings = ping_bench(socket_path, pings=messages, clients=32)
    runs = {"batched": batched, "senders": senders}
    figures = {
        "batch100": batched["send_msgs_per_s"],
        "senders32": senders["send_msgs_per_s"],
        "receive100": batched["receive_msgs_per_s"],
        "stored_bytes": memory["stored_bytes_per_msg"],
        "fsync100": batched["raw_fsync_batch100_records_per_s"],
        "fsync1": batched["raw_fsync_per_s"],
    }
    rows = []
    for key, label, unit, ceiling, target, at_least in TARGETS:
        value = figures[key]
        base = figures[ceiling] if ceiling else None
        measured = value / base if base else value
        cpu: dict[str, Any] = {}
        if key in CPU_OF:
            run, phase = CPU_OF[key]
            cpu = {
                "client_cpu_us": runs[run].get(f"{phase}_client_cpu_us_per_msg"),
                "daemon_cpu_us": runs[run].get(f"{phase}_daemon_cpu_us_per_msg"),
                "cpu_budget_us": round(
                    cpu_budget(key, target, figures, os.cpu_count() or 1) or 0, 2
                ),
            }
            if key == "senders32":
                cpu["round_trip_client_cpu_us"] = pings.get("ping_client_cpu_us_per_msg")
                cpu["round_trip_daemon_cpu_us"] = pings.get("ping_daemon_cpu_us_per_msg")
        rows.append(
            {
                "figure": label,
                "value": round(value, 1),
                "unit": unit,
                "ceiling": None if ceiling is None else CEILINGS[ceiling],
                "ceiling_value": None if base is None else round(base, 1),
                "ratio": None if base is None else round(measured, 3),
                "target": target,
                "at_least": at_least,
                "met": measured >= target if at_least else measured <= target,
                **cpu,
            }
        )
    return {"messages": messages, "stored_messages": stored, "targets": rows}


def targets_table(result: dict[str, Any]) -> list[dict[str, str]]:
    """One row per target: the figure, its ceiling, the ratio and the target."""
    out = []
    for row in result["targets"]:
        ratio, unit = row["ratio"], row["unit"]
        sign = ">=" if row["at_least"] else "<="
        value = f"{row['value']:.1f} B" if unit == "B" else f"{row['value']:,.0f} {unit}"
        ceiling = row["ceiling"]
        out.append(
            {
                "figure": row["figure"],
                "value": value,
                "ceiling": "-" if ceiling is None else f"{row['ceiling_value']:,.0f} ({ceiling})",
                "ratio": "-" if ratio is None else f"{ratio:.2f} x",
                "target": f"{sign} {row['target']:g} " + ("x" if ratio is not None else unit),
                "met": "yes" if row["met"] else "no",
                "clients + daemon CPU per msg (budget)": _cpu_cell(row),
            }
        )
    return out


def _cpu_cell(row: dict[str, Any]) -> str:
    if "cpu_budget_us" not in row:
        return "-"
    client, daemon = row.get("client_cpu_us"), row.get("daemon_cpu_us")
    used = " + ".join("?" if v is None else f"{v:.1f}" for v in (client, daemon))
    budget = row["cpu_budget_us"]
    cell = f"{used} µs ({f'<= {budget:.1f}' if budget > 0 else 'none: the syncs alone miss it'}"
    bare = [row.get(k) for k in ("round_trip_client_cpu_us", "round_trip_daemon_cpu_us")]
    if all(isinstance(v, int | float) for v in bare):
        cell += f"; a bare round trip {bare[0]:.1f} + {bare[1]:.1f}"
    return cell + ")"
