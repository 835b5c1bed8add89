"""The explorer page (daemon/README.md §33) driven in a real headless Chromium.

Debian's ``chromium`` driven by playwright's Python package (never a downloaded browser;
``.ci/run`` installs chromium). One daemon and one browser for the module; each test opens
its own page on the URL ``sbctl explorer --no-open`` prints, and saves a screenshot of the
view it checks under its ``tmp_path``. ``SBCTL_GUIDE_SCREENSHOT=1`` also writes the guide's
picture, ``sbctl/guides/explorer.png``.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect, sync_playwright  # the test extra

from sbctl.client import Client
from sbctl.core.errors import ServerBusy
from tests.conftest import Daemon, dispose, new_daemon

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
GUIDE_PICTURE = Path(__file__).parents[2] / "sbctl" / "guides" / "explorer.png"
TIMEOUT_MS = 15_000

if not os.path.exists(CHROMIUM):
    pytest.skip(
        "chromium is not installed (apt-get install chromium; .ci/run does it)",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    d = new_daemon()
    try:
        d.cli("queue", "create", "orders", "--enable-partitioning", check=True)
        d.cli("topic", "create", "events", check=True)
        yield d
    finally:
        dispose(d)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def url(daemon: Daemon) -> str:
    out = daemon.cli("-o", "json", "explorer", "--no-open", check=True).json()
    assert out["opened"] is False
    return str(out["url"])


@pytest.fixture(scope="module")
def context(browser: Any) -> Iterator[Any]:
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    yield ctx
    ctx.close()


@pytest.fixture(scope="module")
def opened(context: Any, url: str) -> Iterator[tuple[Any, list[str]]]:
    """One page for the module (a page load per test costs seconds on a busy machine);
    ``page`` brings it back to the namespace view before each test."""
    pg = context.new_page()
    pg.set_default_timeout(TIMEOUT_MS)
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.goto(url)
    expect(pg.locator("#tree")).to_contain_text("orders")
    yield pg, errors
    pg.close()


@pytest.fixture
def page(opened: tuple[Any, list[str]]) -> Iterator[Any]:
    pg, errors = opened
    pg.set_viewport_size({"width": 1280, "height": 800})
    if pg.locator("#ns").input_value() != "sbemulatorns":
        pg.locator("#ns").select_option("sbemulatorns")
    pg.locator('nav button.item[data-kind="namespace"]').click()
    expect(pg.locator("h2.title")).to_have_text("Namespace sbemulatorns")
    yield pg
    assert not errors, errors


def refresh(page: Any) -> None:
    """What the page's live refresh (every 2 s) would show, now."""
    page.locator("#refresh").click()


def open_entity(page: Any, path: str, tab: str | None = None) -> None:
    refresh(page)
    page.locator(f'nav button.item[data-path="{path}"]').click()
    expect(page.locator("h2.title")).to_contain_text(path)
    if tab:
        page.locator(f"#tab-{tab}").click()


def shot(page: Any, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path))
    assert path.stat().st_size > 1000
    return path


def peek_json(daemon: Daemon, entity: str) -> list[dict[str, Any]]:
    """What ``sbctl peek -o json`` prints (JSON Lines, one message a line)."""
    return daemon.cli("-o", "json", "peek", entity, "--count", "50", check=True).jsonl()


def test_browse_namespace_and_entity_counts(daemon: Daemon, page: Any, tmp_path: Path) -> None:
    daemon.cli("send", "orders", "--body", "hello", "--repeat", "3", check=True)
    expect(page.locator("#entities")).to_contain_text("events")
    row = page.locator("#entities tr", has_text="orders")
    expect(row).to_contain_text("Available")
    refresh(page)
    page.locator('nav button.item[data-path="orders"]').focus()  # by keyboard
    page.keyboard.press("Enter")
    expect(page.locator("h2.title")).to_contain_text("orders")
    expect(page.locator('[data-card="Active"] .v')).to_have_text(re.compile(r"^[1-9]\d*$"))
    expect(page.locator("#partitions tbody tr")).to_have_count(16)
    page.locator("#tab-messages").click()  # a peek on each partition, shown together
    page.locator("#peek").click()
    expect(page.locator("#messages tbody tr")).to_have_count(3)
    page.locator("#next-page").click()
    expect(page.locator("#no-messages")).to_be_visible()
    # filter by name
    page.keyboard.press("/")  # the filter's shortcut
    expect(page.locator("#filter")).to_be_focused()
    page.keyboard.type("even")
    expect(page.locator('nav button.item[data-path="orders"]')).to_have_count(0)
    expect(page.locator('nav button.item[data-path="events"]')).to_have_count(1)
    page.locator("#filter").fill("")
    page.locator('nav button.item[data-kind="namespace"]').click()
    shot(page, tmp_path, "namespace")
    page.set_viewport_size({"width": 420, "height": 800})  # a narrow window
    expect(page.locator("#entities")).to_be_visible()
    shot(page, tmp_path, "narrow")


def test_a_wrong_token_is_told_and_nothing_shown(context: Any, url: str) -> None:
    page = context.new_page()
    try:
        page.goto(url.split("#")[0] + "#token=not-the-daemons")
        expect(page.locator("h2.title")).to_contain_text("no longer accepts")
        expect(page.locator("#main")).to_contain_text("sbctl explorer")
        expect(page.locator("#tree")).to_be_empty()
    finally:
        page.close()


def test_peek_shows_typed_properties_and_body(daemon: Daemon, page: Any, tmp_path: Path) -> None:
    daemon.cli("queue", "create", "typed", check=True)
    daemon.cli(
        "send",
        "typed",
        "--body",
        '{"order": 7, "items": ["book"]}',
        "--content-type",
        "application/json",
        "--message-id",
        "typed-1",
        "-p",
        "count=5",
        "-p",
        "ratio=2.5",
        "-p",
        "urgent=true",
        "-p",
        "region=eu",
        "-p",
        'trace={"$type": "uuid", "value": "12345678-1234-5678-1234-567812345678"}',
        "-p",
        'due={"$type": "timestamp", "value": "2030-01-02T03:04:05Z"}',
        check=True,
    )
    open_entity(page, "typed", "messages")
    page.locator("#peek").click()
    expect(page.locator("#messages tbody tr")).to_have_count(1)
    props = page.locator("#application-properties tbody tr")
    expected = {
        "count": ("int", "5"),
        "ratio": ("double", "2.5"),
        "urgent": ("boolean", "true"),
        "region": ("string", "eu"),
        "trace": ("uuid", "12345678-1234-5678-1234-567812345678"),
        "due": ("timestamp", "2030-01-02T03:04:05.000Z"),
    }
    expect(props).to_have_count(len(expected))
    seen = {}
    for i in range(props.count()):
        cells = props.nth(i).locator("td").all_inner_texts()
        seen[cells[0]] = (cells[1], cells[2])
    assert seen == expected
    expect(page.locator("#system-properties")).to_contain_text("typed-1")
    expect(page.locator("#body")).to_contain_text('"items": [\n    "book"')  # pretty JSON
    page.locator("#body-hex").click()
    expect(page.locator("#body")).to_contain_text("7b 22 6f 72")  # {"or
    shot(page, tmp_path, "message")
    if os.environ.get("SBCTL_GUIDE_SCREENSHOT") == "1":
        page.locator("#body-json").click()
        page.set_viewport_size({"width": 1280, "height": 1000})
        page.evaluate("window.scrollTo(0, 0)")
        GUIDE_PICTURE.parent.mkdir(exist_ok=True)
        page.screenshot(path=str(GUIDE_PICTURE))


def test_send_with_typed_properties(daemon: Daemon, page: Any, tmp_path: Path) -> None:
    daemon.cli("queue", "create", "sent", check=True)
    open_entity(page, "sent", "send")
    form = page.locator("#send-form")
    form.locator("textarea[name=body]").fill('{"hello": "world"}')
    form.locator("input[name=content_type]").fill("application/json")
    form.locator("input[name=message_id]").fill("page-1")
    form.locator("input[name=partition_key]").fill("pk")
    form.locator("input[name=repeat]").fill("2")
    for name, kind, value in (
        ("n", "int", "42"),
        ("ok", "boolean", "false"),
        ("id", "uuid", "00000000-0000-0000-0000-000000000001"),
    ):
        page.locator("#add-property").click()
        row = page.locator("#send-props .props-row").last
        row.locator(".p-name").fill(name)
        row.locator(".p-type").select_option(kind)
        row.locator(".p-value").fill(value)
    refresh(page)  # the live refresh keeps what is typed
    expect(page.locator('[data-card="Active"] .v')).to_have_text("0")
    expect(form.locator("input[name=message_id]")).to_have_value("page-1")
    expect(page.locator("#send-props .props-row")).to_have_count(3)
    shot(page, tmp_path, "send")
    page.locator("#send").click()
    expect(page.locator("#toast")).to_contain_text("2 message(s) sent to sent")
    messages = peek_json(daemon, "sent")
    assert len(messages) == 2
    m = messages[0]
    assert (m["body"], m["content_type"], m["message_id"], m["partition_key"]) == (
        '{"hello": "world"}',
        "application/json",
        "page-1",
        "pk",
    )
    assert m["application_properties"] == {
        "n": 42,
        "ok": False,
        "id": {"$type": "uuid", "value": "00000000-0000-0000-0000-000000000001"},
    }


def test_dead_letter_then_resubmit(daemon: Daemon, page: Any, tmp_path: Path) -> None:
    daemon.cli("queue", "create", "work", check=True)
    daemon.cli("send", "work", "--body", "one", "--message-id", "w1", check=True)
    daemon.cli("send", "work", "--body", "two", "--message-id", "w2", check=True)
    open_entity(page, "work", "messages")
    page.locator("input[name=count]").fill("2")
    page.locator("input[name=count]").dispatch_event("change")
    page.locator("#receive-lock").click()
    expect(page.locator("#messages tbody tr")).to_have_count(2)
    for seq in (1, 2):
        page.locator("#messages tbody tr").first.click()
        page.locator("#dl-reason").fill("BadOrder")
        page.locator("#dl-description").fill("checked by hand")
        page.locator("#dead-letter").click()
        expect(page.locator("#toast")).to_contain_text(f"message {seq}: dead-letter")
    expect(page.locator('[data-card="Dead-lettered"] .v')).to_have_text("2")
    page.locator("select[name=sub]").select_option("$deadletterqueue")
    expect(page.locator("#messages tbody tr")).to_have_count(2)
    expect(page.locator("#system-properties")).to_contain_text("BadOrder")
    expect(page.locator("#system-properties")).to_contain_text("checked by hand")
    page.locator("#messages tbody tr", has_text="w2").locator("input[type=checkbox]").check()
    shot(page, tmp_path, "dead-letter-queue")
    page.locator("#resubmit-selected").click()
    expect(page.locator("#toast")).to_contain_text("1 message(s) resubmitted to work")
    expect(page.locator('[data-card="Dead-lettered"] .v')).to_have_text("1")
    back = peek_json(daemon, "work")
    assert [(m["message_id"], m["dead_letter_reason"]) for m in back] == [("w2", None)]
    page.locator("#resubmit-all").click()
    expect(page.locator("#toast")).to_contain_text("1 message(s) resubmitted to work")
    expect(page.locator('[data-card="Dead-lettered"] .v')).to_have_text("0")
    assert sorted(m["message_id"] for m in peek_json(daemon, "work")) == ["w1", "w2"]


def test_defer_then_receive_deferred_and_cancel_scheduled(
    daemon: Daemon, page: Any, tmp_path: Path
) -> None:
    daemon.cli("queue", "create", "later", check=True)
    daemon.cli("send", "later", "--body", "defer me", "--message-id", "d1", check=True)
    open_entity(page, "later", "send")
    page.locator("#send-form textarea[name=body]").fill("next year")
    page.locator("#send-form input[name=scheduled]").fill("2099-01-02T03:04:05")
    page.locator("#send").click()
    expect(page.locator('[data-card="Scheduled"] .v')).to_have_text("1")
    page.locator("#tab-messages").click()
    page.locator("#receive-lock").click()
    page.locator("#defer").click()
    expect(page.locator('[data-card="Deferred"] .v')).to_have_text("1")
    page.locator("#peek").click()
    expect(page.locator("#messages tbody tr")).to_have_count(2)
    page.locator("#messages tbody tr", has_text="scheduled").click()
    expect(page.locator("#system-properties")).to_contain_text("2099-01-02T03:04:05")
    page.locator("#cancel-scheduled").click()
    expect(page.locator('[data-card="Scheduled"] .v')).to_have_text("0")
    page.locator("#messages tbody tr", has_text="d1").click()
    page.locator("#receive-deferred").click()
    expect(page.locator("#messages tbody tr", has_text="d1")).to_contain_text("locked")
    page.locator("#complete").click()
    expect(page.locator('[data-card="Deferred"] .v')).to_have_text("0")
    assert peek_json(daemon, "later") == []
    daemon.cli("send", "later", "--body", "x", "--repeat", "3", check=True)
    refresh(page)
    answers = iter(["nope", "purge"])  # the confirmation must be typed
    page.once("dialog", lambda dialog: dialog.accept(next(answers)))
    page.locator("#purge").click()
    expect(page.locator("#toast")).to_contain_text("purge cancelled")
    expect(page.locator('[data-card="Active"] .v')).to_have_text("3")
    page.once("dialog", lambda dialog: dialog.accept(next(answers)))
    page.locator("#purge").click()
    expect(page.locator("#toast")).to_contain_text("3 message(s) purged")
    expect(page.locator('[data-card="Active"] .v')).to_have_text("0")


def test_receive_from_a_session(daemon: Daemon, page: Any) -> None:
    daemon.cli("queue", "create", "chats", "--enable-session", check=True)
    for session in ("alice", "bob"):
        daemon.cli("send", "chats", "--body", f"hi {session}", "--session-id", session, check=True)
    open_entity(page, "chats", "messages")
    page.locator("#session-id").fill("bob")
    page.locator("#session-id").dispatch_event("change")
    page.locator("#receive-lock").click()
    expect(page.locator("#messages tbody tr")).to_have_count(1)
    expect(page.locator("#system-properties")).to_contain_text("bob")
    page.locator("#complete").click()
    expect(page.locator("#toast")).to_contain_text("complete")
    page.locator("#release-session").click()
    expect(page.locator("#toast")).to_contain_text("session bob released")
    assert [m["session_id"] for m in peek_json(daemon, "chats")] == ["alice"]


def test_create_subscription_with_sql_rule_routes(
    daemon: Daemon, page: Any, tmp_path: Path
) -> None:
    open_entity(page, "events", "manage")
    page.locator("#sub-name").fill("eu")
    page.locator("#sub-filter-kind").select_option("sql")
    page.locator("#sub-filter").fill("region = 'eu' AND")
    page.locator("#create-subscription").click()  # the service's own validation message
    expect(page.locator("#toast .error")).to_contain_text("sql_expression")
    expect(page.locator('nav button.item[data-path="events/subscriptions/eu"]')).to_have_count(0)
    page.locator("#sub-filter").fill("region = 'eu'")
    page.locator("#sub-action").fill("SET routed = 'yes'")
    page.locator("#create-subscription").click()
    expect(page.locator("h2.title")).to_contain_text("events/subscriptions/eu")
    daemon.cli("send", "events", "--body", "to eu", "-p", "region=eu", check=True)
    daemon.cli("send", "events", "--body", "to us", "-p", "region=us", check=True)
    refresh(page)
    expect(page.locator('[data-card="Active"] .v')).to_have_text("1")
    page.locator("#tab-manage").click()
    rule = page.locator("#rules tbody tr")
    expect(rule).to_have_count(1)  # the filter took the place of $Default's
    expect(rule).to_contain_text("$Default")
    expect(rule).to_contain_text("region = 'eu'")
    expect(rule).to_contain_text("SET routed = 'yes'")
    shot(page, tmp_path, "subscription-rules")
    page.locator("#tab-messages").click()
    page.locator("#peek").click()
    expect(page.locator("#body")).to_contain_text("to eu")
    expect(page.locator("#application-properties")).to_contain_text("routed")
    # the rule's own view: a refused replacement keeps the old rule, a good one replaces it
    page.locator('nav button.item[data-path="events/subscriptions/eu/rules/$Default"]').click()
    expect(page.locator("h2.title")).to_contain_text("Rule $Default")
    page.locator("#rule-filter-kind").select_option("correlation")
    page.locator("#rule-filter").fill('{"subject": ""}')
    page.locator("#replace-rule").click()
    expect(page.locator("#toast .error", has_text="non-empty string")).to_be_visible()
    expect(page.locator("#rule")).to_contain_text("SQL: region = 'eu'")
    page.locator("#rule-filter").fill('{"subject": "red", "properties": {"size": 2}}')
    page.locator("#rule-action").fill("")
    page.locator("#replace-rule").click()
    expect(page.locator("#rule")).to_contain_text(
        'Correlation: {"subject":"red","properties":{"size":2}}'
    )
    daemon.cli("send", "events", "--subject", "red", "-p", "size=2", "--body", "red", check=True)
    daemon.cli("send", "events", "--subject", "red", "-p", "size=3", "--body", "big", check=True)
    page.locator("#delete-rule").click()
    expect(page.locator("h2.title")).to_contain_text("events/subscriptions/eu")
    expect(page.locator('[data-card="Active"] .v')).to_have_text("2")
    expect(page.locator('[data-card="Rules"] .v')).to_have_text("0")


def test_faulted_partition_and_throttled_namespace(
    daemon: Daemon, page: Any, tmp_path: Path
) -> None:
    daemon.cli("fault", "add", "--entity", "orders", "--partition", "3", check=True)
    try:
        open_entity(page, "orders")
        row = page.locator('#partitions tr[data-partition="3"]')
        expect(row).to_contain_text("Unavailable")
        expect(page.locator('#partitions tr[data-partition="2"]')).to_contain_text("Available")
        expect(page.locator('nav button.item[data-path="orders"]')).to_contain_text("Limited")
        shot(page, tmp_path, "faulted-partition")
        page.locator("#tab-messages").click()
        page.locator("#peek").click()
        expect(page.locator("#toast .error", has_text="partition 3:")).to_be_visible()
        expect(page.locator("#messages tbody tr")).to_have_count(3)  # the others answer
        page.locator('nav button.item[data-kind="namespace"]').click()
        expect(page.locator("#fault-state")).to_have_text("1 on")
    finally:
        daemon.cli("fault", "clear", check=True)
    refresh(page)
    expect(page.locator("#fault-state")).to_have_text("off")
    with daemon.client() as admin:
        admin.namespace_create("busyns")  # unthrottled in tests: the page sets 20 credits/s
        admin.namespace_create("sparens")
    daemon.cli(
        "namespace",
        "pair",
        "busyns",
        "--secondary",
        "sparens",
        "--backlog-queue-count",
        "2",
        check=True,
    )
    refresh(page)
    page.locator("#ns").select_option("busyns")
    expect(page.locator("#pairing")).to_contain_text("sparens")
    expect(page.locator("#pairing")).to_contain_text("busyns/x-servicebus-transfer/1")
    expect(page.locator("#throttle-state")).to_have_text("Not throttled")
    page.locator("#throttling input[name=cps]").fill("20")
    page.locator("#throttling button").click()
    expect(page.locator('[data-card="Credits / s"] .v')).to_have_text("20")
    _throttle(daemon, "busyns")
    refresh(page)
    expect(page.locator("#throttle-state")).to_have_text("Throttled")
    expect(page.locator('[data-card="Throttled requests"] .v')).not_to_have_text("0")
    shot(page, tmp_path, "throttled")


def _throttle(daemon: Daemon, namespace: str) -> None:
    """Management reads until the namespace refuses one (bounded: 200 requests, 10 s)."""
    deadline = time.monotonic() + 10
    with Client(daemon.socket, namespace=namespace, retry_total=0) as sb:
        sb.queue_create("q")
        for _ in range(200):
            try:
                sb.queue_get("q")
            except ServerBusy:
                return
            assert time.monotonic() < deadline
    raise AssertionError("the namespace was never throttled")
