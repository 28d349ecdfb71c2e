"""The on-disk session directory: one per cluster.

::

    <TRACEDRAY_TEMP_DIR>/session_<UTC time>_<pid>/   (session_latest → newest)
      address        the GCS address (host:port) of the head
      session.json   session id, start time, head node id
      logs/<component>-<pid>.jsonl     and its rotated parts, .000001.jsonl[.zst], …
      traces/<component>-<pid>.jsonl   (docs/trace-store.md)
      spill/
      auth_token     the cluster's token (``core/auth.py``)

The folder and its subfolders are 0700 and the files in it 0600: logs, traces and
objects may hold what tasks print and compute, the token lets anyone run code.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from tracedray import config
from tracedray.exceptions import ClusterConnectionError

LATEST_LINK = "session_latest"


@dataclass(frozen=True)
class SessionPaths:
    root: Path

    @property
    def session_id(self) -> str:
        return self.root.name

    @property
    def address_file(self) -> Path:
        return self.root / "address"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def traces_dir(self) -> Path:
        return self.root / "traces"

    @property
    def spill_dir(self) -> Path:
        return self.root / "spill"

    @property
    def info_file(self) -> Path:
        return self.root / "session.json"

    @property
    def token_file(self) -> Path:
        return self.root / "auth_token"

    def ensure(self) -> SessionPaths:
        for folder in (self.root, self.logs_dir, self.traces_dir, self.spill_dir):
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        return self

    def read_address(self) -> str:
        try:
            return self.address_file.read_text().strip()
        except FileNotFoundError as exc:
            raise ClusterConnectionError(
                f"no address file at {self.address_file}: the session has no running head"
            ) from exc


def temp_root() -> Path:
    return config.TEMP_DIR.get()


def create_session(root: Path | None = None, *, publish: bool = True) -> SessionPaths:
    """Create a fresh session folder; with ``publish``, point ``session_latest`` at it.

    A caller that may still fail to bring its cluster up (``init()``) creates the
    folder unpublished and calls :func:`publish_latest` once it is up, or
    :func:`discard` if not: a failed start must not take ``session_latest`` from the
    cluster that is running.
    """
    base = root or temp_root()
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    stamp = time.strftime("%Y-%m-%d_%H-%M-%S", time.gmtime())
    path = base / f"session_{stamp}_{os.getpid()}"
    suffix = 0
    while path.exists():
        suffix += 1
        path = base / f"session_{stamp}_{os.getpid()}_{suffix}"
    session = SessionPaths(path).ensure()
    write_private(session.info_file, json.dumps({"session_id": session.session_id,
                                                 "created": time.time()}))
    if publish:
        publish_latest(session)
    return session


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, owner-only (0600) whatever the umask, atomically."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)  # O_CREAT's mode does not apply to a file that existed
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def publish_latest(session: SessionPaths) -> None:
    """Point ``<root>/session_latest`` at ``session``, atomically."""
    base = session.root.parent
    link = base / LATEST_LINK
    tmp_link = base / f".{LATEST_LINK}.{os.getpid()}"
    try:
        if tmp_link.is_symlink() or tmp_link.exists():
            tmp_link.unlink()
        tmp_link.symlink_to(session.root.name)
        os.replace(tmp_link, link)  # atomic: readers never see a missing link
    except OSError:
        pass


def discard(session: SessionPaths) -> None:
    """Remove a session folder that never held a cluster (a failed start)."""
    shutil.rmtree(session.root, ignore_errors=True)


def latest_session(root: Path | None = None) -> SessionPaths:
    base = root or temp_root()
    link = base / LATEST_LINK
    if not link.exists():
        raise ClusterConnectionError(
            f"no tracedray session found under {base} (looked for {link}); "
            "start one with `tracedray start --head` or tracedray.init()"
        )
    return SessionPaths(link.resolve())


def session_for_address(address: str, root: Path | None = None) -> SessionPaths | None:
    """Find the local session folder whose address file names ``address``, newest first."""
    base = root or temp_root()
    if not base.is_dir():
        return None
    candidates = sorted(base.glob("session_2*"), key=lambda p: p.stat().st_mtime, reverse=True)
    for candidate in candidates:
        try:
            if (candidate / "address").read_text().strip() == address:
                return SessionPaths(candidate)
        except OSError:
            continue
    return None

