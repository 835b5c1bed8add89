"""SAS tokens at the $cbs node: the namespace key signs them; a wrong key, key name or
an expired token is refused with a reason."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from sbctl.core.errors import BadRequest
from sbctld.frontends.amqp.cbs import (
    DEFAULT_KEY,
    DEFAULT_KEY_NAME,
    Keys,
    check_token,
    make_token,
    token_problem,
)

AUDIENCE = "sb://localhost:5672/orders"


def test_a_token_signed_with_the_namespace_key_is_accepted() -> None:
    token = make_token(AUDIENCE, DEFAULT_KEY_NAME, DEFAULT_KEY, 2_000)
    assert check_token(token, DEFAULT_KEY_NAME, DEFAULT_KEY, 1_000) is None


def test_the_sdks_own_token_is_accepted() -> None:
    from datetime import timedelta

    from azure.servicebus._base_handler import _generate_sas_token

    token = _generate_sas_token(AUDIENCE, DEFAULT_KEY_NAME, DEFAULT_KEY, timedelta(hours=1))
    text = token.token.decode() if isinstance(token.token, bytes) else token.token
    assert check_token(text, DEFAULT_KEY_NAME, DEFAULT_KEY, token.expires_on - 60) is None


def test_bad_tokens_are_refused_with_the_reason() -> None:
    good = make_token(AUDIENCE, DEFAULT_KEY_NAME, DEFAULT_KEY, 2_000)
    assert "signature" in str(check_token(good, DEFAULT_KEY_NAME, "other-key", 1_000))
    assert "expired" in str(check_token(good, DEFAULT_KEY_NAME, DEFAULT_KEY, 3_000))
    assert "key name" in str(check_token(good, "SomeOtherKey", DEFAULT_KEY, 1_000))
    assert "not a SharedAccessSignature" in str(check_token("Bearer x", "k", "k", 0))
    assert "'se'" in str(check_token("SharedAccessSignature sr=a&sig=b&skn=k", "k", "k", 0))
    tampered = good.replace("orders", "billing")
    assert "signature" in str(check_token(tampered, DEFAULT_KEY_NAME, DEFAULT_KEY, 1_000))


def test_refusals_carry_the_code_service_bus_words_them_with() -> None:
    good = make_token(AUDIENCE, DEFAULT_KEY_NAME, DEFAULT_KEY, 2_000)
    codes = {
        "wrong key": token_problem(good, DEFAULT_KEY_NAME, "other-key", 1_000),
        "unknown key name": token_problem(good, "SomeOtherKey", DEFAULT_KEY, 1_000),
        "expired": token_problem(good, DEFAULT_KEY_NAME, DEFAULT_KEY, 3_000),
        "not SAS": token_problem("Bearer x", "k", "k", 0),
    }
    assert {what: problem and problem[0] for what, problem in codes.items()} == {
        "wrong key": "InvalidSignature",
        "unknown key name": "InvalidSignature",
        "expired": "ExpiredToken",
        "not SAS": "MalformedToken",
    }
    assert token_problem(good, DEFAULT_KEY_NAME, DEFAULT_KEY, 1_000) is None


def test_keys_default_and_are_stored_owner_only(tmp_path: Path) -> None:
    keys = Keys(tmp_path / "amqp" / "keys.json")
    assert keys.get("sbemulatorns") == (DEFAULT_KEY_NAME, DEFAULT_KEY)
    keys.set("Orders-NS", "app", "s3cret")
    assert Keys(tmp_path / "amqp" / "keys.json").get("orders-ns") == ("app", "s3cret")
    assert os.stat(tmp_path / "amqp" / "keys.json").st_mode & 0o077 == 0


def test_a_refused_key_changes_nothing_and_a_lost_keys_file_comes_back_from_its_seal(
    tmp_path: Path,
) -> None:
    path = tmp_path / "amqp" / "keys.json"
    keys = Keys(path)
    keys.set("orders-ns", "app", "s3cret")
    for name, key, words in [
        ("", "k", "key name ''"),
        ("a b", "k", "key name 'a b'"),
        ("x" * 257, "k", "1 to 256"),
        ("app", "", "the key is empty"),
        ("app", "a;b", "';'"),
        ("app", "a\nb", "printable"),
    ]:
        with pytest.raises(BadRequest, match=re.escape(words)):
            keys.set("orders-ns", name, key)
    assert keys.get("orders-ns") == ("app", "s3cret")
    keys.set("other-ns", "R.o_t-1", "x" * 256)  # the limits themselves are accepted
    path.unlink()  # the sealed copy is written first: the keys survive losing the file
    assert Keys(path).get("orders-ns") == ("app", "s3cret")
    assert Keys(path).get("OTHER-NS") == ("R.o_t-1", "x" * 256)
