"""``sbctl send|peek|receive`` and ``sbctl message complete|abandon``.

``send --input`` reads JSON Lines (one message object per line, the SDK's snake_case field
names: :func:`sbctl.core.messages.message_from_json`). Every line is parsed and checked before
anything is sent, so a bad line N fails the command as ``line N: ...`` with nothing sent.
Messages go out in requests of at most ``--batch-size`` messages and
:data:`MAX_REQUEST_BODY_BYTES` of bodies; each request is stored atomically.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from sbctl.cli import options, render
from sbctl.cli.options import EntityArgument, PropertyOption, SendEntityArgument
from sbctl.core.errors import BadRequest, SbctlError
from sbctl.core.wire_errors import error_from_wire

if TYPE_CHECKING:
    from sbctl.client import Client
    from sbctl.core.messages import ReceivedMessage
    from sbctl.core.records import Message

# Below the 256 KB Standard message-size limit (daemon/README.md §13.1), leaving room for
# properties.
MAX_REQUEST_BODY_BYTES = 200 * 1024
MAX_PEEK = 250  # daemon/README.md §13.2; sbctl.core.limits.MAX_PEEK, pinned by a test
SUMMARY_OVER = 20  # more sequence numbers than this print as one summary line
MAX_TOKENS_NAMED = 5  # a settle error names at most this many failed lock tokens


message_group = options.new_app("Settle messages received with --settle none.")


def register(app: typer.Typer) -> None:
    app.command()(send)
    app.command()(peek)
    app.command()(receive)
    app.command("receive-deferred")(receive_deferred)
    app.add_typer(message_group, name="message")


def _text(decl: str, help: str, metavar: str = "TEXT") -> Any:
    return typer.Option(decl, metavar=metavar, show_default=False, help=help)


SettleOption = Annotated[
    Literal["complete", "abandon", "defer", "dead-letter", "none"] | None,
    typer.Option(
        "--settle",
        show_default=False,
        help="What to do with peek-locked messages once printed (default: complete); "
        "none prints lock tokens for `sbctl message ...`.",
    ),
]
SequenceNumbersArgument = Annotated[
    list[int],
    typer.Argument(metavar="SEQ", show_default=False, help="Sequence numbers."),
]


def send(
    ctx: typer.Context,
    entity: SendEntityArgument,
    body: Annotated[str | None, _text("--body", "Message body (UTF-8 text).")] = None,
    body_file: Annotated[
        str | None, _text("--body-file", "Read the body from FILE ('-': stdin).", "FILE")
    ] = None,
    input_file: Annotated[
        str | None,
        _text("--input", "Send the JSON Lines messages of FILE ('-': stdin).", "FILE"),
    ] = None,
    message_id: Annotated[str | None, _text("--message-id", "MessageId.")] = None,
    session_id: Annotated[str | None, _text("--session-id", "SessionId.")] = None,
    partition_key: Annotated[str | None, _text("--partition-key", "PartitionKey.")] = None,
    correlation_id: Annotated[str | None, _text("--correlation-id", "CorrelationId.")] = None,
    subject: Annotated[str | None, _text("--subject", "Subject (label).")] = None,
    content_type: Annotated[str | None, _text("--content-type", "ContentType.")] = None,
    to: Annotated[str | None, _text("--to", "To.")] = None,
    reply_to: Annotated[str | None, _text("--reply-to", "ReplyTo.")] = None,
    reply_to_session_id: Annotated[
        str | None, _text("--reply-to-session-id", "ReplyToSessionId.")
    ] = None,
    time_to_live: Annotated[
        str | None, _text("--time-to-live", "TimeToLive (PT1H, 30s).", "DUR")
    ] = None,
    scheduled_enqueue_time: Annotated[
        str | None,
        _text(
            "--scheduled-enqueue-time",
            "Enqueue at this UTC time (2026-11-21T10:00:00Z, +5m).",
            "TIME",
        ),
    ] = None,
    props: PropertyOption = None,
    repeat: Annotated[
        int,
        typer.Option(
            "--repeat", metavar="N", min=1, help="Send N copies of the --body/--body-file message."
        ),
    ] = 1,
    batch_size: Annotated[
        int, typer.Option("--batch-size", metavar="N", min=1, help="Messages per request.")
    ] = 100,
    transaction: Annotated[
        bool,
        typer.Option(
            "--transaction",
            help="Send every message in one transaction: all or nothing, at most 100 "
            "messages; on a partitioned queue all need one partition key.",
        ),
    ] = False,
) -> None:
    """Send messages: one from --body or --body-file, or JSON Lines from --input.

    The message flags set every message's fields; with --input they fill in the fields a
    line does not set. Prints the sequence numbers assigned.
    """
    g = options.state(ctx)
    if sum(value is not None for value in (body, body_file, input_file)) != 1:
        ctx.fail("give exactly one of --body, --body-file or --input")
    if input_file is not None and repeat != 1:
        ctx.fail("--repeat copies a --body or --body-file message, not --input")
    data = read_input(input_file) if input_file is not None else b""
    relative = _relative(ctx.params) or RELATIVE_IN_JSON.search(data) is not None
    now_ms = namespace_now_ms(ctx, relative=relative)
    defaults = message_defaults(ctx.params, now_ms)
    if input_file is not None:
        messages = messages_from_lines(data.split(b"\n"), defaults, now_ms)
    else:
        from sbctl.core.records import Message

        data = body.encode() if body is not None else read_input(str(body_file))
        messages = [Message(body=data, **defaults)] * repeat
    if transaction:
        with options.connect(ctx) as sb:
            with sb.transaction() as tx:
                sb.send(entity, messages)
            numbers = list((tx.result or {}).get("sequence_numbers", []))
        result: dict[str, Any] = {"sent": len(numbers), "sequence_numbers": numbers}
    else:
        result = _send_all(ctx, entity, messages, batch_size)
    render.emit(g.output, result, _sent)


def read_input(path: str) -> bytes:
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as exc:
        raise BadRequest(f"cannot read {path}: {exc.strerror or exc}") from None


# A JSON string that may be a relative time (``"+5m"``, ``"now"``).
RELATIVE_IN_JSON = re.compile(rb'"\s*(?:\+|now")', re.IGNORECASE)


def _relative(params: dict[str, Any]) -> bool:
    at = params.get("scheduled_enqueue_time")
    return at is not None and (at.strip().startswith("+") or at.strip().lower() == "now")


def namespace_now_ms(ctx: typer.Context, *, relative: bool) -> int:
    """What ``+5m`` and ``now`` count from: the namespace's time when a relative time may
    be read (it runs ahead of the clock once moved, daemon/README.md §31), else the clock."""
    if not relative:
        return time.time_ns() // 1_000_000
    from sbctl.core.durations import parse_absolute_instant_ms

    with options.connect(ctx) as sb:
        return parse_absolute_instant_ms(sb.clock_show()["now_utc"])


def message_defaults(params: dict[str, Any], now_ms: int) -> dict[str, Any]:
    """Message fields set by flags, validated once."""
    from sbctl.core.records import STRING_FIELDS

    out = {name: params[name] for name in STRING_FIELDS if params.get(name) is not None}
    ttl = options.duration_ms(params.get("time_to_live"), "--time-to-live")
    if ttl is not None:
        out["time_to_live_ms"] = _positive_ttl(ttl)
    at = options.instant_ms(
        params.get("scheduled_enqueue_time"), "--scheduled-enqueue-time", now_ms
    )
    if at is not None:
        out["scheduled_enqueue_time_ms"] = at
    props = options.properties(params.get("props"))
    if props:
        out["application_properties"] = props
    return out


def _positive_ttl(ttl_ms: int) -> int:
    """A --time-to-live the service takes, else a usage error naming the flag
    (daemon/README.md §1.6)."""
    from sbctl.core.durations import MAX_TIMESPAN_MS

    if not 0 < ttl_ms <= MAX_TIMESPAN_MS:
        raise typer.BadParameter(
            "must be a positive duration (at most about 29,000 years), e.g. 30s or PT1H",
            param_hint="'--time-to-live'",
        )
    return ttl_ms


def messages_from_lines(
    lines: Iterable[bytes], defaults: dict[str, Any], now_ms: int
) -> list[Message]:
    """Parse JSON Lines (blank lines skipped); the first bad line fails as ``line N: ...``."""
    from sbctl.core.messages import message_from_json

    out = []
    for number, raw in enumerate(lines, 1):
        try:
            text = raw.decode("utf-8")
            if not text.strip():
                continue
            message = message_from_json(json.loads(text), now_ms)
        except UnicodeDecodeError:
            raise BadRequest(f"line {number}: not valid UTF-8") from None
        except json.JSONDecodeError as exc:
            raise BadRequest(
                f"line {number}: invalid JSON: {exc.msg} (column {exc.colno})"
            ) from None
        except SbctlError as exc:
            raise BadRequest(f"line {number}: {exc.message}") from None
        except (ValueError, TypeError, OverflowError) as exc:
            raise BadRequest(f"line {number}: {exc}") from None
        out.append(with_defaults(message, defaults))
    return out


def with_defaults(message: Message, defaults: dict[str, Any]) -> Message:
    """``message`` with the flag ``defaults`` for the fields it does not set; its own
    application properties win over ``-p`` ones of the same key."""
    import msgspec

    changes = {
        k: v
        for k, v in defaults.items()
        if k != "application_properties" and getattr(message, k) is None
    }
    props = defaults.get("application_properties")
    if props:
        changes["application_properties"] = {**props, **(message.application_properties or {})}
    return msgspec.structs.replace(message, **changes) if changes else message


def batches(
    messages: Sequence[Message], size: int, max_bytes: int = MAX_REQUEST_BODY_BYTES
) -> Iterator[list[Message]]:
    """Consecutive requests of at most ``size`` messages and ``max_bytes`` of bodies (a
    larger single message goes alone, for the daemon to accept or refuse)."""
    batch: list[Message] = []
    total = 0
    for message in messages:
        n = len(message.body)
        if batch and (len(batch) >= size or total + n > max_bytes):
            yield batch
            batch, total = [], 0
        batch.append(message)
        total += n
    if batch:
        yield batch


def _send_all(
    ctx: typer.Context, entity: str, messages: list[Message], batch_size: int
) -> dict[str, Any]:
    """Send in batches: ``{"sent", "sequence_numbers", "diverted", "diverted_to",
    "diverted_namespace"}``. A paired primary's failed-over entity diverts messages to a
    backlog queue of the secondary namespace; they answer sequence number 0, and
    ``diverted_to`` names the backlog queue that took them (None when none was diverted).
    """
    numbers: list[int] = []
    out: dict[str, Any] = {
        "sent": 0,
        "sequence_numbers": numbers,
        "diverted": 0,
        "diverted_to": None,
        "diverted_namespace": None,
    }
    if not messages:
        return out
    with options.connect(ctx) as sb:
        for batch in batches(messages, batch_size):
            try:
                answer = _send_batch(sb, entity, batch)
            except SbctlError as err:
                if not numbers:
                    raise
                sent = f"{len(numbers)} of {len(messages)} messages were sent before this"
                raise type(err)(f"{err.message} ({sent})", retry_after=err.retry_after) from None
            numbers += answer["sequence_numbers"]
            if answer.get("diverted_to") is not None or answer.get("diverted_unknown"):
                out["diverted"] += len(answer["sequence_numbers"])
                out["diverted_to"] = answer["diverted_to"]
                out["diverted_namespace"] = answer.get("diverted_namespace")
    out["sent"] = len(numbers)
    return out


def _send_batch(sb: Client, entity: str, batch: list[Message]) -> dict[str, Any]:
    """``sb.send_report``; against a daemon older than the CLI (started before an
    upgrade), which does not know the report, a plain send (diversions then show as
    sequence number 0, their backlog queue unknown)."""
    try:
        return sb.send_report(entity, batch)
    except BadRequest as err:
        if "unknown field `report`" not in err.message:
            raise
    numbers = sb.send(entity, batch)
    diverted = bool(numbers) and not any(numbers)
    return {"sequence_numbers": numbers, "diverted_to": None, "diverted_unknown": diverted}


def _sent(result: dict[str, Any]) -> str:
    """What a send prints: the sequence numbers, one a line (a summary when there are more
    than :data:`SUMMARY_OVER`, per partition on a partitioned entity); a diversion to a
    backlog queue says so."""
    numbers: list[int] = [n for n in result["sequence_numbers"] if n]
    lines: list[str] = []
    if len(numbers) > SUMMARY_OVER:
        lines += _summary(numbers)
    elif numbers:
        label = "sequence number" if len(numbers) == 1 else "sequence numbers"
        numbered = ", ".join(map(str, numbers))
        lines.append(f"sent {render.plural(len(numbers), 'message')}: {label} {numbered}")
    diverted = result.get("diverted") or 0
    if diverted:
        where = "a backlog queue (restart the daemon to see which)"
        if result.get("diverted_to") is not None:
            queue = render.escape(str(result["diverted_to"]))
            namespace = render.escape(str(result.get("diverted_namespace")))
            where = f"backlog queue {queue} of namespace {namespace}"
        lines.append(
            f"diverted {render.plural(diverted, 'message')} to {where}: the entity has "
            "failed over (backlog messages have no sequence number in the entity)"
        )
    if not lines:
        return f"sent {render.plural(result.get('sent', 0), 'message')}"
    return "\n".join(lines)


def _summary(numbers: list[int]) -> list[str]:
    """``sent 100 messages (seq 1..100)``; on a partitioned entity one line per partition."""
    from sbctl.core.partitioning import split_sequence_number

    by_partition: dict[int, list[int]] = {}
    for n in numbers:
        by_partition.setdefault(split_sequence_number(n)[0], []).append(n)
    head = f"sent {render.plural(len(numbers), 'message')}"
    if len(by_partition) == 1 and 0 in by_partition:
        return [f"{head} (seq {min(numbers)}..{max(numbers)})"]
    lines = [f"{head} to {render.plural(len(by_partition), 'partition')}:"]
    for partition, seqs in sorted(by_partition.items()):
        lines.append(
            f"  partition {partition}: {render.plural(len(seqs), 'message')}, "
            f"seq {min(seqs)}..{max(seqs)}"
        )
    return lines


def peek(
    ctx: typer.Context,
    entity: EntityArgument,
    count: Annotated[
        int, typer.Option("--count", metavar="N", min=1, max=MAX_PEEK, help="Messages to peek.")
    ] = 1,
    from_sequence: Annotated[
        int | None,
        typer.Option(
            "--from-sequence",
            metavar="N",
            min=0,
            show_default=False,
            help="Start at this sequence number (default: after the last peeked).",
        ),
    ] = None,
) -> None:
    """Show messages without locking or removing them."""
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        received = sb.peek(entity, count, from_sequence)
    render.emit(g.output, [m.to_dict() for m in received], render.messages, lines=True)


def receive(
    ctx: typer.Context,
    entity: EntityArgument,
    count: Annotated[
        int, typer.Option("--count", metavar="N", min=1, help="Most messages to receive.")
    ] = 1,
    max_wait: Annotated[
        str,
        typer.Option(
            "--max-wait", metavar="DUR", help="How long to wait for the first message (5s, PT1M)."
        ),
    ] = "0s",
    mode: Annotated[
        Literal["peek-lock", "receive-and-delete"], typer.Option("--mode", help="Receive mode.")
    ] = "peek-lock",
    settle: SettleOption = None,
    session_id: Annotated[
        str | None,
        typer.Option(
            "--session-id",
            show_default=False,
            help="Receive from this session of a session-enabled queue or subscription.",
        ),
    ] = None,
    next_session: Annotated[
        bool,
        typer.Option("--next-session", help="Receive from the next unlocked session."),
    ] = False,
) -> None:
    """Receive messages, print them and settle them.

    On a session-enabled queue give --session-id or --next-session: the session is locked
    for this command and released at its end (kept until it expires with --settle none).
    """
    if session_id is not None and next_session:
        ctx.fail("give --session-id or --next-session, not both")
    wait_s = (options.duration_ms(max_wait, "--max-wait") or 0) / 1000
    _receive_in_session(
        ctx,
        entity,
        mode,
        settle,
        (session_id is not None or next_session, session_id),
        lambda sb, token: sb.receive(entity, count, wait_s, mode, token),
    )


def _receive_in_session(
    ctx: typer.Context,
    entity: str,
    mode: str,
    settle: str | None,
    session: tuple[bool, str | None],
    take: Callable[[Client, str | None], list[ReceivedMessage]],
) -> None:
    """``take`` messages and settle them; with ``session`` (in one, its id) first lock the
    session (the next unlocked one without an id), take with its lock token and release it
    at the end (kept until it expires with --settle none)."""
    in_session, session_id = session
    if not in_session:
        _receive_and_settle(ctx, entity, mode, settle, lambda sb: take(sb, None))
        return
    held: dict[str, Any] = {}

    def fetch(sb: Client) -> list[ReceivedMessage]:
        held.update(sb.accept_session(entity, session_id))
        return take(sb, held["session_lock_token"])

    def release(sb: Client) -> None:
        if (settle or "complete") != "none" or mode == "receive-and-delete":
            sb.close_session(entity, held["session_lock_token"])

    _receive_and_settle(ctx, entity, mode, settle, fetch, release)


def _receive_and_settle(
    ctx: typer.Context,
    entity: str,
    mode: str,
    settle: str | None,
    fetch: Callable[[Client], list[ReceivedMessage]],
    finish: Callable[[Client], None] | None = None,
) -> None:
    g = options.state(ctx)
    if mode == "receive-and-delete" and settle not in (None, "none"):
        ctx.fail(f"--settle {settle} needs --mode peek-lock: receive-and-delete settles at once")
    op = settle or ("complete" if mode == "peek-lock" else "none")
    with options.connect(ctx) as sb:
        received = fetch(sb)
        # Printed before settling: a crash in between redelivers rather than loses. The
        # table shows lock tokens only when they are left for the caller to settle.
        table = render.messages if op == "none" else _settled_table
        render.emit(g.output, [m.to_dict() for m in received], table, lines=True)
        tokens = [m.lock_token for m in received if m.lock_token]
        if op != "none" and tokens:
            check_settled(op, sb.settle(entity, op, tokens))
        if finish is not None:
            finish(sb)


def _settled_table(items: list[dict[str, Any]]) -> Any:
    """Messages this command settles: their lock tokens are of no further use."""
    return render.messages([{**m, "lock_token": None} for m in items])


def receive_deferred(
    ctx: typer.Context,
    entity: EntityArgument,
    sequence_numbers: SequenceNumbersArgument,
    mode: Annotated[
        Literal["peek-lock", "receive-and-delete"], typer.Option("--mode", help="Receive mode.")
    ] = "peek-lock",
    settle: SettleOption = None,
    session_id: Annotated[
        str | None,
        typer.Option(
            "--session-id",
            show_default=False,
            help="The session of a session-enabled queue or subscription the messages were "
            "deferred in (locked for this command).",
        ),
    ] = None,
) -> None:
    """Receive deferred messages by sequence number, print and settle them."""
    _receive_in_session(
        ctx,
        entity,
        mode,
        settle,
        (session_id is not None, session_id),
        lambda sb, token: sb.receive_deferred(entity, sequence_numbers, mode, token),
    )


def check_settled(op: str, results: list[dict[str, Any]]) -> None:
    """Raise the first failed token's error, naming the failed tokens and counting them."""
    failed = [r for r in results if "error" in r]
    if not failed:
        return
    first = error_from_wire(failed[0]["error"])
    tokens = [render.escape(str(r.get("lock_token"))) for r in failed]
    shown = ", ".join(tokens[:MAX_TOKENS_NAMED]) + (
        ", ..." if len(tokens) > MAX_TOKENS_NAMED else ""
    )
    raise type(first)(
        f"could not {op} {len(failed)} of {render.plural(len(results), 'message')} "
        f"(lock token{'s' if len(tokens) > 1 else ''} {shown}): {first.message}"
    )


def _settled(verb: str) -> render.Renderer:
    def lines(results: list[dict[str, Any]]) -> str | None:
        if not results:
            return None
        return "\n".join(f"{verb} {render.escape(str(r.get('lock_token')))}" for r in results)

    return lines


TokensArgument = Annotated[
    list[str],
    typer.Argument(metavar="TOKEN", show_default=False, help="Lock tokens printed by receive."),
]


@message_group.command()
def complete(ctx: typer.Context, entity: EntityArgument, tokens: TokensArgument) -> None:
    """Complete locked messages: remove them from the entity."""
    _settle_command(ctx, entity, tokens, "complete", "completed")


@message_group.command()
def abandon(
    ctx: typer.Context,
    entity: EntityArgument,
    tokens: TokensArgument,
    props: PropertyOption = None,
) -> None:
    """Abandon locked messages: release them for redelivery, optionally changing properties."""
    _settle_command(ctx, entity, tokens, "abandon", "abandoned", options.properties(props) or None)


@message_group.command()
def defer(
    ctx: typer.Context,
    entity: EntityArgument,
    tokens: TokensArgument,
    props: PropertyOption = None,
) -> None:
    """Defer locked messages: keep them, receivable only by sequence number."""
    _settle_command(ctx, entity, tokens, "defer", "deferred", options.properties(props) or None)


@message_group.command("dead-letter")
def dead_letter(
    ctx: typer.Context,
    entity: EntityArgument,
    tokens: TokensArgument,
    reason: Annotated[
        str | None, typer.Option("--reason", show_default=False, help="DeadLetterReason.")
    ] = None,
    description: Annotated[
        str | None,
        typer.Option("--description", show_default=False, help="DeadLetterErrorDescription."),
    ] = None,
    props: PropertyOption = None,
) -> None:
    """Move locked messages to the dead-letter queue (ENTITY/$deadletterqueue)."""
    changes = options.properties(props) or None
    _settle_command(
        ctx, entity, tokens, "dead-letter", "dead-lettered", changes, reason, description
    )


@message_group.command("renew-lock")
def renew_lock(ctx: typer.Context, entity: EntityArgument, tokens: TokensArgument) -> None:
    """Extend locks by the entity's lock duration, counted from now."""
    _settle_command(ctx, entity, tokens, "renew-lock", "renewed")


def _settle_command(
    ctx: typer.Context,
    entity: str,
    tokens: list[str],
    op: str,
    verb: str,
    changes: dict[str, Any] | None = None,
    reason: str | None = None,
    description: str | None = None,
) -> None:
    g = options.state(ctx)
    with options.connect(ctx) as sb:
        results = sb.settle(entity, op, tokens, changes, reason, description)
    # stdout gets the tokens settled; the failures go to stderr, as the command's error.
    done = [r for r in results if "error" not in r]
    render.emit(g.output, done, _settled(verb), lines=True)
    check_settled(op, results)
