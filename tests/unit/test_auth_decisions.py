"""The auth decisions (core/auth.py) and the TLS settings (core/tls.py), without a cluster."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from tracedray.core import auth, tls
from tracedray.core.session import create_session, write_private
from tracedray.exceptions import AuthenticationError, ConfigError, RayError

TOKEN = "unit-test-token-0123456789abcdef"


@pytest.fixture(autouse=True)
def _clean(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("TRACEDRAY_AUTH_TOKEN", "TRACEDRAY_AUTH_MODE", "TRACEDRAY_TLS_CERT",
                 "TRACEDRAY_TLS_KEY", "TRACEDRAY_TLS_CA"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TRACEDRAY_TEMP_DIR", str(tmp_path))
    auth.reset()


def test_new_tokens_are_long_and_distinct() -> None:
    tokens = {auth.new_token() for _ in range(50)}
    assert len(tokens) == 50
    assert all(len(t) >= 43 for t in tokens)  # 32 random bytes, base64url
    assert all(auth.validate_token(t, "test") == t for t in tokens)


def test_token_comparison() -> None:
    assert auth.token_matches(TOKEN, TOKEN)
    assert auth.token_matches(TOKEN, TOKEN.encode())
    assert not auth.token_matches(TOKEN, TOKEN[:-1])
    assert not auth.token_matches(TOKEN, TOKEN + "x")
    assert not auth.token_matches(TOKEN, b"")


@pytest.mark.parametrize("bad", ["short", "has a space in it 0123456789", "tab\there-0123456789"])
def test_bad_tokens_are_refused_without_echoing_them(bad: str) -> None:
    with pytest.raises(ConfigError) as info:
        auth.validate_token(bad, "TRACEDRAY_AUTH_TOKEN")
    assert "TRACEDRAY_AUTH_TOKEN" in str(info.value) and bad not in str(info.value)


def test_choose_token_takes_the_first_non_empty_source() -> None:
    assert auth.choose_token([(None, "a"), ("", "b"), ("  ", "c")]) == auth.TokenChoice(None, "")
    choice = auth.choose_token([(None, "given"), (f" {TOKEN}\n", "file"), ("other" * 5, "x")])
    assert choice == auth.TokenChoice(TOKEN, "file")


def test_settings_accept_only_the_token_unless_disabled() -> None:
    on = auth.AuthSettings(True, TOKEN)
    assert on.accepts(TOKEN) and not on.accepts(None) and not on.accepts("x" * 32)
    assert not auth.AuthSettings(True, None).accepts(TOKEN)  # no token known: fail closed
    assert auth.AuthSettings(False, None).accepts(None)


def test_metadata_and_handshake_round_trip() -> None:
    metadata = [("x-other", "1"), (auth.METADATA_KEY, auth.bearer(TOKEN))]
    assert auth.token_from_metadata(metadata) == TOKEN
    assert auth.token_from_metadata([(auth.METADATA_KEY, TOKEN)]) is None  # not a bearer
    assert auth.token_from_metadata(None) is None
    assert auth.handshake_token(auth.handshake_payload(TOKEN)) == TOKEN.encode()
    assert auth.handshake_token(auth.handshake_payload(None)) == b""
    assert auth.handshake_token(b"\x0a\x03abc") is None


def test_refusals_are_logged_sparingly_but_all_counted() -> None:
    logged = [n for n in range(1, 5001) if auth.should_log_refusal(n)]
    assert logged[:auth.LOG_FIRST_REFUSALS] == list(range(1, auth.LOG_FIRST_REFUSALS + 1))
    assert len(logged) == auth.LOG_FIRST_REFUSALS + 5
    before = auth.statistics()
    assert auth.count_refusal("rpc") == before.rpc_refused + 1
    assert auth.count_refusal("stream") == before.streams_refused + 1


def test_refusal_message_says_where_and_how_never_the_token() -> None:
    message = auth.refusal_message("10.0.0.1:6379", "TRACEDRAY_AUTH_TOKEN")
    assert "10.0.0.1:6379" in message and "get-auth-token" in message
    assert "TRACEDRAY_AUTH_TOKEN" in message
    assert "no token" in auth.refusal_message("h:1", "")
    assert issubclass(AuthenticationError, RayError)
    assert issubclass(AuthenticationError, PermissionError)


def test_find_token_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    session = create_session()
    write_private(session.address_file, "127.0.0.1:5000")
    assert auth.find_token("127.0.0.1:5000") == auth.TokenChoice(None, "")
    auth.store_token("user-file-token-0123456789", session.root, user_file=True)
    write_private(session.token_file, "session-token-0123456789")
    assert auth.find_token("127.0.0.1:5000").token == "session-token-0123456789"
    assert auth.find_token(None).token == "session-token-0123456789"  # the newest session
    # Another address: no session names it, the per-user file answers.
    assert auth.find_token("127.0.0.1:5001").token == "user-file-token-0123456789"
    monkeypatch.setenv("TRACEDRAY_AUTH_TOKEN", "env-token-0123456789")
    assert auth.find_token("127.0.0.1:5000").token == "env-token-0123456789"
    assert auth.find_token("127.0.0.1:5000", "given-token-0123456789") == auth.TokenChoice(
        "given-token-0123456789", "the given token")


def test_token_files_are_owner_only(tmp_path: Path) -> None:
    session = create_session()
    auth.store_token(TOKEN, session.root, user_file=True)
    for path in (session.token_file, auth.user_token_file()):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert path.read_text() == TOKEN
    assert stat.S_IMODE(session.root.stat().st_mode) == 0o700


def test_a_process_without_settings_uses_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert auth.current() == auth.AuthSettings(True, None)
    monkeypatch.setenv("TRACEDRAY_AUTH_TOKEN", TOKEN)
    assert auth.current().token == TOKEN
    monkeypatch.setenv("TRACEDRAY_AUTH_MODE", "disabled")
    assert not auth.current().enabled
    assert auth.client_token("127.0.0.1:1").token is None


def test_a_cluster_process_needs_a_token(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="TRACEDRAY_AUTH_TOKEN is not set"):
        auth.configure_from_environment()
    monkeypatch.setenv("TRACEDRAY_AUTH_MODE", "disabled")
    assert not auth.configure_from_environment().enabled
    monkeypatch.setenv("TRACEDRAY_AUTH_MODE", "token")
    monkeypatch.setenv("TRACEDRAY_AUTH_TOKEN", TOKEN)
    assert auth.configure_from_environment() == auth.AuthSettings(
        True, TOKEN, "TRACEDRAY_AUTH_TOKEN")
    monkeypatch.setenv("TRACEDRAY_AUTH_MODE", "open")
    with pytest.raises(ConfigError, match="TRACEDRAY_AUTH_MODE"):
        auth.configure_from_environment()


def test_the_process_configuration_never_shows_the_token(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tracedray.logs._process_info import effective_configuration

    monkeypatch.setenv("TRACEDRAY_AUTH_TOKEN", TOKEN)
    shown = effective_configuration()
    assert shown["TRACEDRAY_AUTH_TOKEN"] == "<set>"
    assert TOKEN not in repr(shown)


def test_tls_settings_come_as_a_set(tmp_path: Path) -> None:
    cert, key, ca = tmp_path / "c.pem", tmp_path / "k.pem", tmp_path / "ca.pem"
    assert tls.choose(None, None, None) is None
    assert tls.choose(cert, key, None) == tls.TlsFiles(cert, key, None)
    assert tls.choose(cert, key, ca) == tls.TlsFiles(cert, key, ca)
    with pytest.raises(ConfigError, match="both"):
        tls.choose(cert, None, None)
    with pytest.raises(ConfigError, match="without"):
        tls.choose(None, None, ca)


def test_tls_variables_must_name_files(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TRACEDRAY_TLS_CERT", str(tmp_path / "missing.pem"))
    with pytest.raises(ConfigError, match="TRACEDRAY_TLS_CERT"):
        tls.from_config()


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.0.1.1", True), ("::1", True), ("localhost", True),
    ("0.0.0.0", False), ("10.0.0.5", False), ("example.org", False)])
def test_which_listen_addresses_are_loopback(host: str, loopback: bool) -> None:
    from tracedray.core.rpc import is_loopback

    assert is_loopback(host) is loopback
