"""Tables written without rich's layout engine (sbctl.cli.render.plain) are what rich
prints, character for character, wherever the plain writer answers; where it does not
(too wide, not plain ASCII, another kind of renderable) rich prints them."""

from __future__ import annotations

import io

from hypothesis import event, given, settings
from hypothesis import strategies as st
from rich.console import Console, Group

from sbctl.cli import render

# Printable ASCII (what the plain writer takes), or more (what it leaves to rich).
ASCII = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=24)
TEXT = st.text(alphabet=st.characters(min_codepoint=9, max_codepoint=0x2FF), max_size=12)


def rich_prints(shown: object, width: int) -> str:
    out = io.StringIO()
    console = Console(
        file=out, width=width, highlight=False, markup=False, emoji=False, force_terminal=False
    )
    console.print(shown)
    return out.getvalue()


@st.composite
def tables(draw: st.DrawFn) -> object:
    text = ASCII if draw(st.booleans()) else TEXT
    headers = draw(st.lists(text.filter(bool), min_size=1, max_size=7))
    tight = tuple(h for h in headers if draw(st.booleans()))
    table = render._table(*headers, tight=tight)
    for _ in range(draw(st.integers(0, 6))):
        table.add_row(*(draw(text) for _ in headers))
    return table


@settings(max_examples=400, deadline=None)
@given(tables(), st.integers(20, 220))
def test_a_table_reads_as_rich_prints_it(table: object, width: int) -> None:
    text = render.plain(table, width)
    event("written plainly" if text is not None else "left to rich")
    if text is not None:
        assert text == rich_prints(table, width)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(tables(), TEXT.filter(render._printable)), min_size=1, max_size=4))
def test_a_group_reads_as_rich_prints_it(parts: list[object]) -> None:
    group = Group(*parts)
    text = render.plain(group, 200)
    if text is not None:
        assert text == rich_prints(group, 200)


def test_the_usual_tables_are_written_plainly() -> None:
    queues = [
        {"name": "orders", "status": "Active", "active_message_count": 3, "size_in_bytes": 2048}
    ]
    table = render.rows(["name", "status", "active_message_count", "size_in_bytes"])(queues)
    assert render.plain(table, 200) == rich_prints(table, 200)
    shown = render.record(
        {
            "name": "orders",
            "lock_duration": "PT1M",
            "partitions": [
                {"partition_id": 0, "active_message_count": 1},
                {"partition_id": 1, "active_message_count": 2},
            ],
        }
    )
    assert render.plain(shown, 200) == rich_prints(shown, 200)


def test_what_rich_must_lay_out_is_left_to_it() -> None:
    wide = render._table("a", "b")
    wide.add_row("x" * 150, "y" * 80)
    assert render.plain(wide, 200) is None  # folded by rich
    accented = render._table("name")
    accented.add_row("café")
    assert render.plain(accented, 200) is None
    titled = render._table("a")
    titled.title = "t"
    assert render.plain(titled, 200) is None
    assert render.plain(object(), 200) is None
