"""Who may talk to a cluster: its token, where a process finds it, how it is checked.

A cluster has one shared secret, made by the head (``secrets.token_urlsafe(32)``:
256 bits) unless given. Every gRPC call carries it as ``authorization: Bearer
<token>`` metadata (``rpc_auth``), and every task stream starts with a handshake
frame holding it (``task_stream``). A server compares in constant time and
refuses anything else with UNAUTHENTICATED, before any handler runs.

Where a process finds the token, first hit wins (``choose_token``): an explicit
value (``init(_auth_token=...)``, ``tracedray start --token``), then
``TRACEDRAY_AUTH_TOKEN``, then the ``auth_token`` file of the local session folder
that names the cluster's address, then the per-user file ``$TRACEDRAY_TEMP_DIR/
auth_token`` that ``tracedray start --head`` writes. The session file comes before
the per-user one because several clusters of one user (tests run in parallel) must
not read each other's token. Processes a node spawns inherit the token through
their environment. ``TRACEDRAY_AUTH_MODE=disabled`` turns all of it off.
"""

from __future__ import annotations

import hmac
import secrets
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tracedray import config
from tracedray.exceptions import ConfigError

TOKEN_FILE_NAME = "auth_token"  # in a session folder, and per user in TEMP_DIR
METADATA_KEY = "authorization"
BEARER_PREFIX = "Bearer "
# The task stream's first frame: this, then the token (empty when auth is disabled).
HANDSHAKE_MAGIC = b"tracedray-auth-1\n"
MAX_HANDSHAKE_BYTES = 4096
MIN_TOKEN_CHARS = 16
# Refusals are logged one by one up to this many, then one in LOG_EVERY (a scanner
# must not fill the disk); all are counted.
LOG_FIRST_REFUSALS = 20
LOG_EVERY = 1000


@dataclass(frozen=True)
class AuthSettings:
    """What this process presents and expects. ``token`` None with ``enabled``: the
    process knows no token, so its servers refuse every caller (fail closed)."""

    enabled: bool
    token: str | None
    source: str = ""  # where the token came from, for refusal messages

    def accepts(self, given: str | bytes | None) -> bool:
        if not self.enabled:
            return True
        return self.token is not None and given is not None and token_matches(self.token, given)


@dataclass(frozen=True)
class TokenChoice:
    token: str | None
    source: str  # where it came from, for messages ("" when none was found)


@dataclass(frozen=True)
class AuthStatistics:
    enabled: bool
    rpc_refused: int
    streams_refused: int


# --- pure decisions

def new_token() -> str:
    return secrets.token_urlsafe(32)


def validate_token(token: str, source: str) -> str:
    """The token stripped, or ConfigError saying what is wrong with it (never its value)."""
    text = token.strip()
    if len(text) < MIN_TOKEN_CHARS:
        raise ConfigError(f"the auth token from {source} is {len(text)} characters long; use "
                          f"at least {MIN_TOKEN_CHARS} (`tracedray start --head` makes one)")
    # gRPC metadata values must be printable ASCII without spaces at the ends.
    if not all(33 <= ord(c) < 127 for c in text):
        raise ConfigError(f"the auth token from {source} has characters other than printable "
                          "ASCII without spaces")
    return text


def token_matches(expected: str, given: str | bytes) -> bool:
    """Constant-time comparison (no timing hint of how much of a guess was right)."""
    given_bytes = given.encode() if isinstance(given, str) else given
    return hmac.compare_digest(expected.encode(), given_bytes)


def choose_token(candidates: Iterable[tuple[str | None, str]]) -> TokenChoice:
    """The first non-empty ``(token, source)``, validated; TokenChoice(None, "") if none."""
    for token, source in candidates:
        if token and token.strip():
            return TokenChoice(validate_token(token, source), source)
    return TokenChoice(None, "")


def bearer(token: str) -> str:
    return BEARER_PREFIX + token


def token_from_metadata(metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
    for key, value in metadata or ():
        if key == METADATA_KEY:
            text = value.decode(errors="replace") if isinstance(value, bytes) else value
            return text[len(BEARER_PREFIX):] if text.startswith(BEARER_PREFIX) else None
    return None


def handshake_payload(token: str | None) -> bytes:
    return HANDSHAKE_MAGIC + (token or "").encode()


def handshake_token(payload: bytes) -> bytes | None:
    """The token a handshake payload carries, or None if it is not a handshake."""
    if not payload.startswith(HANDSHAKE_MAGIC):
        return None
    return payload[len(HANDSHAKE_MAGIC):]


def should_log_refusal(count: int) -> bool:
    return count <= LOG_FIRST_REFUSALS or count % LOG_EVERY == 0


def refusal_message(address: str, source: str) -> str:
    if not source:
        tried = "it presented no token: none was found"
    elif source.startswith(("the ", "a ")):
        tried = f"it presented {source}"
    else:
        tried = f"it presented the token from {source}"
    return (f"the cluster at {address} refused this process's credentials ({tried}). Use "
            "the cluster's token: on the head's machine `tracedray get-auth-token` prints "
            "it; give it here with TRACEDRAY_AUTH_TOKEN, init(..., _auth_token=...) or "
            "`tracedray start --address ... --token ...`")


# --- files (owner-only)

def session_token_file(session_root: Path) -> Path:
    return session_root / TOKEN_FILE_NAME


def store_token(token: str, session_root: Path, *, user_file: bool) -> None:
    """Owner-only copies where local drivers and CLIs look (``find_token``)."""
    from tracedray.core.session import write_private

    write_private(session_token_file(session_root), token)
    if user_file:
        path = user_token_file()
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_private(path, token)


def user_token_file(temp_root: Path | None = None) -> Path:
    return (temp_root or config.TEMP_DIR.get()) / TOKEN_FILE_NAME


def read_token_file(path: Path) -> str | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return text or None


def choose_for_new_cluster(explicit: str | None) -> TokenChoice:
    """The token of a cluster this process starts: given, else from the environment,
    else a new one."""
    choice = choose_token([(explicit, "the given token"),
                           (config.AUTH_TOKEN.get(), config.AUTH_TOKEN.name)])
    return choice if choice.token is not None else TokenChoice(new_token(), "a new token")


def find_token(address: str | None, explicit: str | None = None) -> TokenChoice:
    """The token to present to the cluster at ``address`` (None: the newest session's)."""
    from tracedray.core import session

    def session_candidate() -> tuple[str | None, str]:
        found = session.session_for_address(address) if address else None
        if found is None and address is None:
            try:
                found = session.latest_session()
            except Exception:  # noqa: BLE001 - no session: fall through to the user file
                found = None
        if found is None:
            return None, ""
        path = session_token_file(found.root)
        return read_token_file(path), str(path)

    user_file = user_token_file()
    candidates: list[tuple[str | None, str]] = [
        (explicit, "the given token"), (config.AUTH_TOKEN.get(), config.AUTH_TOKEN.name)]
    choice = choose_token(candidates)
    if choice.token is not None:
        return choice
    return choose_token([session_candidate(), (read_token_file(user_file), str(user_file))])


# --- this process's settings

_lock = threading.Lock()
_settings: AuthSettings | None = None  # None: not configured, see current()
_client_tokens: dict[str, TokenChoice] = {}  # per address, for unconfigured processes
# Tokens of clusters this process started or learned of (``remember``): kept across
# a driver's shutdown, which only clears the lookups above.
_known: dict[str, TokenChoice] = {}
# The token of the cluster this process last read (adopt): for its raylets and workers.
_fallback: TokenChoice | None = None
_rpc_refused = 0
_streams_refused = 0


def enabled_by_config() -> bool:
    return config.AUTH_MODE.get() != "disabled"


def configure(token: str | None, *, enabled: bool | None = None,
              source: str = "") -> AuthSettings:
    """Set what this process presents and expects (a driver at init, a node at start)."""
    global _settings
    settings = AuthSettings(enabled_by_config() if enabled is None else enabled, token, source)
    with _lock:
        _settings = settings
        _client_tokens.clear()
    return settings


def configure_from_environment() -> AuthSettings:
    """A cluster process: its token comes from the environment its starter gave it."""
    if not enabled_by_config():
        return configure(None, enabled=False)
    choice = choose_token([(config.AUTH_TOKEN.get(), config.AUTH_TOKEN.name)])
    if choice.token is None:
        raise ConfigError(f"{config.AUTH_TOKEN.name} is not set: a cluster process needs the "
                          f"cluster's token (or {config.AUTH_MODE.name}=disabled)")
    return configure(choice.token, enabled=True, source=choice.source)


def reset() -> None:
    """Back to unconfigured (a driver's shutdown): the next cluster brings its own token."""
    global _settings
    with _lock:
        _settings = None
        _client_tokens.clear()


def current() -> AuthSettings:
    """This process's settings; unconfigured (a test's own server, a script), the
    token of the environment, if any."""
    settings = _settings
    if settings is not None:
        return settings
    if not enabled_by_config():
        return AuthSettings(False, None)
    try:
        choice = choose_token([(config.AUTH_TOKEN.get(), config.AUTH_TOKEN.name)])
    except ConfigError:  # a malformed token matches nothing; setup_process reports it
        return AuthSettings(True, None)
    return AuthSettings(True, choice.token, choice.source)


def client_token(address: str) -> TokenChoice:
    """What to present to ``address``: the configured token; else one remembered for it
    (given to ``join_node``, or of nodes this process started: they win over the
    environment, as ``--token`` does); else one found for it (``find_token``: a CLI, a
    script that only reads) and kept for the next call."""
    settings = _settings
    if settings is not None:
        if not settings.enabled:
            return TokenChoice(None, "")
        return TokenChoice(settings.token, settings.source)
    if not enabled_by_config():
        return TokenChoice(None, "")
    with _lock:
        known = _client_tokens.get(address) or _known.get(address)
    if known is None:
        known = find_token(address)
        if known.token is not None:  # none found: look again next call (it may appear)
            with _lock:
                _client_tokens[address] = known
        elif _fallback is not None:  # a node of the cluster this process reads (adopt)
            return _fallback
    return known


def adopt(address: str) -> None:
    """A process that reads a cluster (the CLI, a script of the state API) presents the
    token found for its GCS at ``address`` to the other processes of that cluster too
    (raylets and workers reached through the GCS: stack dumps, files, index queries),
    whose addresses no session file names. The latest cluster read wins."""
    global _fallback
    choice = client_token(address)
    if choice.token is not None:
        with _lock:
            _fallback = choice


def remember(address: str, choice: TokenChoice) -> None:
    """Present ``choice`` to ``address`` from now on, unless configured otherwise: the
    processes of a cluster this process started (a test, a script), a raylet found
    through its GCS (whose token was found for the GCS's address)."""
    if choice.token is None:
        return
    with _lock:
        _known[address] = choice


def forget(address: str | None = None) -> None:
    """Look the token for ``address`` up again next time (a refused one: remembered
    ones too); None: every lookup (a driver's shutdown), not what was remembered."""
    global _fallback
    with _lock:
        if address is None:
            _client_tokens.clear()
            _fallback = None
        else:
            _client_tokens.pop(address, None)
            _known.pop(address, None)


def count_refusal(kind: str) -> int:
    """Count one refusal (``"rpc"`` or ``"stream"``); returns the total of that kind."""
    global _rpc_refused, _streams_refused
    with _lock:
        if kind == "rpc":
            _rpc_refused += 1
            return _rpc_refused
        _streams_refused += 1
        return _streams_refused


def statistics() -> AuthStatistics:
    with _lock:
        return AuthStatistics(current().enabled, _rpc_refused, _streams_refused)
