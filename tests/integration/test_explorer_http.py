"""Who may drive the explorer's API (daemon/README.md §33), with plain HTTP requests to a real
daemon: a foreign Origin or Host is refused, so is a request without the daemon's token;
a namespace's SAS token reaches that namespace only; the page itself carries no secret."""

from __future__ import annotations

import json
import os
import re
import stat
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sbctl.core import layout
from sbctld.frontends.http.auth import make_token
from tests.conftest import Daemon, dispose, new_daemon

NS = "sbemulatorns"
KEY_NAME, KEY = "RootManageSharedAccessKey", "SAS_KEY_VALUE"


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    d = new_daemon()
    try:
        d.cli("queue", "create", "orders", check=True)
        d.cli("namespace", "create", "otherns", check=True)
        yield d
    finally:
        dispose(d)


@pytest.fixture(scope="module")
def site(daemon: Daemon) -> tuple[str, str]:
    """(base URL, token) from ``sbctl explorer --no-open``."""
    url = daemon.cli("-o", "json", "explorer", "--no-open", check=True).json()["url"]
    base, _, rest = url.partition("/explorer")
    return base, rest.split("#token=")[1]


def test_cli_prints_the_url_with_the_token(daemon: Daemon, site: tuple[str, str]) -> None:
    out = daemon.cli("-o", "json", "explorer", "--no-open", check=True).json()
    assert out["opened"] is False
    pattern = r"http://127\.0\.0\.1:\d+/explorer\?namespace=sbemulatorns#token=[\w-]{40,}"
    assert re.fullmatch(pattern, out["url"]), out
    text = daemon.cli("explorer", "--no-open", check=True).stdout.strip()
    assert text == out["url"]


def call(
    base: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def api(site: tuple[str, str], op: str, args: dict[str, Any], **headers: str) -> tuple[int, Any]:
    base, token = site
    sent = {"Authorization": f"Bearer {token}", "Content-Type": "application/json", **headers}
    status, _, body = call(base, f"/explorer/api/op/{op}", args, sent)
    return status, json.loads(body)


def test_foreign_origin_is_refused(site: tuple[str, str], daemon: Daemon) -> None:
    base, _ = site
    args = {"namespace": NS, "entity": "orders", "messages": [{"body": "x"}]}
    for origin in ("http://evil.example", "null", base.replace("127.0.0.1", "127.0.0.2")):
        status, body = api(site, "send", args, Origin=origin)
        assert status == 403, (origin, body)
        assert "Origin" in body["error"]["message"]
    status, body = api(site, "send", args, **{"Sec-Fetch-Site": "cross-site"})
    assert status == 403, body
    with daemon.client() as sb:
        assert sb.queue_get("orders")["active_message_count"] == 0
    status, body = api(site, "send", args, Origin=base, **{"Sec-Fetch-Site": "same-origin"})
    assert (status, body) == (200, [1])


def test_foreign_host_is_refused_even_for_the_page(site: tuple[str, str]) -> None:
    base, _ = site
    for path in ("/explorer", "/explorer/static/app.js"):
        status, _, body = call(base, path, headers={"Host": "rebound.example:5300"})
        assert status == 403 and b"Host" in body
    status, body = api(site, "namespace_list", {}, Host="rebound.example")
    assert status == 403
    assert api(site, "namespace_list", {}, Host="localhost")[0] == 200


def test_token_required_and_checked(site: tuple[str, str]) -> None:
    base, _ = site
    status, _, body = call(base, "/explorer/api/op/namespace_list", {}, {})
    assert status == 401 and b"Authorization" in body
    bad = {"Authorization": "Bearer not-the-token"}
    assert call(base, "/explorer/api/op/namespace_list", {}, bad)[0] == 401
    assert call(base, "/explorer/api/op/namespace_list", None, {})[0] in (401, 405)


def test_sas_token_reaches_its_namespace_only(site: tuple[str, str]) -> None:
    base, _ = site
    sas = make_token(base, KEY_NAME, KEY, int(time.time()) + 600)
    status, body = api(site, "namespace_list", {}, Authorization=sas)
    assert status == 200 and [n["name"] for n in body] == [NS]
    status, body = api(site, "queue_get", {"namespace": NS, "name": "orders"}, Authorization=sas)
    assert status == 200 and body["name"] == "orders"
    status, body = api(site, "overview", {"name": "otherns"}, Authorization=sas)
    assert status == 403 and "otherns" in body["error"]["message"]
    status, body = api(site, "queue_list", {"namespace": "otherns"}, Authorization=sas)
    assert status == 403
    every = {"namespace": NS, "all_namespaces": True}
    status, body = api(site, "fault_clear", every, Authorization=sas)
    assert status == 403 and "every namespace" in body["error"]["message"]
    assert api(site, "status", {}, Authorization=sas)[0] == 403


def test_only_page_operations_and_clear_errors(site: tuple[str, str]) -> None:
    for op in ("shutdown", "load_adopt", "namespace_set_key", "nope"):
        status, body = api(site, op, {})
        assert status == 400 and op in body["error"]["message"]
    status, body = api(site, "peek", {"namespace": NS, "entity": "orders", "bogus": 1})
    assert status == 400 and "bogus" in body["error"]["message"]
    status, body = api(site, "queue_get", {"namespace": NS, "name": "missing"})
    assert status == 404 and body["error"]["code"] == "MessagingEntityNotFound"
    args = {"namespace": NS, "entity": "orders", "messages": [{"body": "x", "ttl": 1}]}
    status, body = api(site, "send", args)
    assert status == 400 and "ttl" in body["error"]["message"]
    huge = {"body": "x", "application_properties": {"n": 2**64}}
    status, body = api(site, "send", {"namespace": NS, "entity": "orders", "messages": [huge]})
    assert status == 400 and "too large" in body["error"]["message"]


def test_page_is_served_without_secrets_and_framing(site: tuple[str, str]) -> None:
    base, token = site
    status, headers, body = call(base, "/explorer", headers={"Accept": "text/html"})
    assert status == 200 and b"app.js" in body and token.encode() not in body
    assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
    assert "Set-Cookie" not in headers and "Access-Control-Allow-Origin" not in headers
    for name in ("app.js", "entity.js", "manage.js", "ui.js", "app.css"):
        assert call(base, f"/explorer/static/{name}")[0] == 200
    assert call(base, "/explorer/static/..%2Fguard.py")[0] == 404
    req = urllib.request.Request(base + "/", headers={"Accept": "text/html"})
    opener = urllib.request.build_opener(NoRedirect)
    with pytest.raises(urllib.error.HTTPError) as got:
        opener.open(req, timeout=30)
    got.value.close()
    assert got.value.code == 302 and got.value.headers["Location"] == "/explorer"


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any) -> None:
        return None


def test_token_file_is_private_and_new_at_each_start(daemon: Daemon) -> None:
    path = layout.explorer_token_file(Path(daemon.data_dir))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    before = path.read_text()
    daemon.stop()
    daemon.start()
    assert path.read_text() != before
