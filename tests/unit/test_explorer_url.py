"""``sbctl explorer``'s URL and whether it opens a browser (sbctl.cli.cmd_explorer)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbctl.cli.cmd_explorer import explorer_url, has_display
from sbctl.core import layout
from sbctl.core.errors import InvalidOperation


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    token = layout.explorer_token_file(tmp_path)
    token.parent.mkdir(parents=True)
    token.write_text("tok-en_1\n")
    return tmp_path


def status(data_dir: Path, **ports: object) -> dict[str, object]:
    return {"data_dir": str(data_dir), "http_port": None, "amqp_port": None, **ports}


def test_http_port_first_then_the_amqp_port(data_dir: Path) -> None:
    both = status(data_dir, http_host="127.0.0.1", http_port=5300, amqp_port=5672)
    assert explorer_url(both, "ns one") == (
        "http://127.0.0.1:5300/explorer?namespace=ns%20one#token=tok-en_1"
    )
    amqp_only = status(data_dir, amqp_host="127.0.0.1", amqp_port=5672)
    assert explorer_url(amqp_only, "ns").startswith("http://127.0.0.1:5672/explorer?")


def test_wildcard_and_ipv6_hosts(data_dir: Path) -> None:
    assert "//127.0.0.1:1/" in explorer_url(status(data_dir, http_host="0.0.0.0", http_port=1), "n")
    assert "//[::1]:1/" in explorer_url(status(data_dir, http_host="::1", http_port=1), "n")


def test_no_port_or_no_token_is_one_clear_error(data_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(InvalidOperation, match="without HTTP and AMQP ports"):
        explorer_url(status(data_dir), "n")
    with pytest.raises(InvalidOperation, match="cannot read the explorer token"):
        explorer_url(status(tmp_path / "elsewhere", http_port=1), "n")


def test_a_browser_only_with_a_display(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.platform", "linux")
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    assert not has_display()
    monkeypatch.setenv("WAYLAND_DISPLAY", "wayland-0")
    assert has_display()
