"""Doing what rotation.py decides: renames, compressions and drops in a session folder.

Run by each node's telemetry agent after its round (core/raylet/telemetry_agent.py),
at its priority. A current file rotates under its spool's lock (the lock every copier
and converter takes before appending to it: spool_files.py), after the index took in
all of it; the index then renames its entries (trace_index.IndexWriter.rename), so a
part is whole in the index. A process writing its file directly (no spool:
TRACEDRAY_TELEMETRY_MAPPED_FILES=false, a forked child) may append to a part for a
moment after its rename; the part is compressed only once nobody has written it for
TRACEDRAY_LOG_ROTATION_COMPRESS_DELAY_S. A drop deletes the part, makes the index
forget its lines (readers then say that range is gone) and is logged by the caller.
Several agents sharing a session folder may run this at once: each step tolerates a
file another one moved or removed first.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tracedray import config
from tracedray.telemetry import line_file, rotated_file
from tracedray.telemetry.export_config import EXPORT_DIR
from tracedray.telemetry.rotation import Action, FileFact, Limits, Step, plan
from tracedray.telemetry.spool_files import lock_spool
from tracedray.telemetry.trace_index import INDEX_NAME, KINDS, IndexWriter

SPOOL_SUFFIX = ".spool"  # span and log spools alike: <component>-<pid>.spool


def limits_from_config() -> Limits:
    return Limits(rotation_bytes=config.LOG_ROTATION_BYTES.get(),
                  backup_count=config.LOG_ROTATION_BACKUP_COUNT.get(),
                  compress_delay_s=config.LOG_ROTATION_COMPRESS_DELAY_S.get(),
                  session_max_bytes=config.SESSION_MAX_BYTES.get())


@dataclass(frozen=True)
class Dropped:
    kind: str
    name: str
    bytes: int
    reason: str


@dataclass
class RotationRound:
    rotated: int = 0
    compressed: int = 0
    bytes_saved: int = 0  # by this round's compressions
    dropped: list[Dropped] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RotationStatistics:
    rounds: int
    rotated: int
    compressed: int
    bytes_saved: int
    dropped: int  # parts (telemetry.retention_dropped)
    dropped_bytes: int


def list_files(session_root: Path) -> tuple[list[FileFact], int]:
    """The session's line files on this machine, and the bytes of everything else in
    ``logs/``, ``traces/`` and the index (which count against the session limit)."""
    facts: list[FileFact] = []
    other = 0
    for kind in KINDS:
        try:
            entries = list(os.scandir(session_root / kind))
        except OSError:
            continue
        for entry in entries:
            try:
                stat = entry.stat()
            except OSError:
                continue
            parsed = line_file.parse_name(entry.name)
            if parsed is None or not entry.is_file():
                other += stat.st_blocks * 512 if entry.is_file() else 0
                continue
            facts.append(FileFact(kind, parsed.name, parsed.base, parsed.number,
                                  entry.name.endswith(rotated_file.SUFFIX),
                                  stat.st_size, stat.st_mtime))
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(OSError):
            other += (session_root / f"{INDEX_NAME}{suffix}").stat().st_size
    return facts, other


class Rotator:
    """Rotates, compresses and drops one session folder's line files."""

    def __init__(self, session_root: Path, limits: Limits | None = None) -> None:
        self.root = session_root
        self.limits = limits if limits is not None else limits_from_config()
        # Its own connection, one that waits a little for another agent's write lock:
        # a rename the index misses costs a part's re-indexing.
        self._index = IndexWriter(session_root, timeout_s=2.0)
        self._lock = threading.Lock()
        self._stats = RotationStatistics(0, 0, 0, 0, 0, 0)
        self._said_no_zstd = False

    def close(self) -> None:
        self._index.close()

    def run_once(self, now: float | None = None) -> RotationRound:
        """List, decide, act. Never raises; what failed is in ``warnings``."""
        result = RotationRound()
        files, other = list_files(self.root)
        for step in plan(files, time.time() if now is None else now, self.limits,
                         other_bytes=other):
            try:
                self._do(step, result)
            except OSError as exc:
                result.warnings.append(f"{step.action.value} {step.file.kind}/"
                                       f"{step.file.name}: {exc}")
        with self._lock:
            old = self._stats
            self._stats = RotationStatistics(
                old.rounds + 1, old.rotated + result.rotated,
                old.compressed + result.compressed, old.bytes_saved + result.bytes_saved,
                old.dropped + len(result.dropped),
                old.dropped_bytes + sum(drop.bytes for drop in result.dropped))
        return result

    def statistics(self) -> RotationStatistics:
        with self._lock:
            return self._stats

    def _do(self, step: Step, result: RotationRound) -> None:
        folder = self.root / step.file.kind
        if step.action is Action.ROTATE:
            if self._rotate(folder, step, result):
                result.rotated += 1
        elif step.action is Action.COMPRESS:
            plain = folder / step.file.name
            try:
                stored = rotated_file.compress_file(plain)
            except FileNotFoundError:
                return  # another agent compressed or dropped it first
            except ImportError as exc:  # an install without the zstandard wheel
                if not self._said_no_zstd:
                    self._said_no_zstd = True
                    result.warnings.append(f"rotated parts stay uncompressed: {exc} "
                                           "(pip install zstandard)")
                return
            result.compressed += 1
            result.bytes_saved += step.file.size - stored.stat().st_size
        else:
            on_disk = line_file.stored_path(folder / step.file.name)
            if on_disk is None:
                return
            with contextlib.suppress(FileNotFoundError):
                on_disk.unlink()
                result.dropped.append(Dropped(step.file.kind, step.file.name, step.file.size,
                                              step.reason.value))
                warning = self._index.forget(step.file.kind, step.file.name,
                                             step.file.size, step.reason.value)
                if warning:
                    result.warnings.append(warning)

    def _move_export_cursors(self, step: Step) -> None:
        """The OTLP export cursors of the file follow it into its part (agent_export.py):
        the part goes on from where its export was, the new current file from 0. An
        exporter that holds the cursor open keeps writing the same (renamed) file."""
        try:
            destinations = list(os.scandir(self.root / EXPORT_DIR))
        except OSError:
            return
        for destination in destinations:
            folder = Path(destination.path) / step.file.kind
            with contextlib.suppress(OSError):
                os.rename(folder / f"{step.file.name}.offset",
                          folder / f"{step.new_name}.offset")

    def _rotate(self, folder: Path, step: Step, result: RotationRound) -> bool:
        current = folder / step.file.name
        spool = folder / (step.file.name[:-len(line_file.LINES_SUFFIX)] + SPOOL_SUFFIX)
        fd = -1
        with contextlib.suppress(FileNotFoundError):
            fd = os.open(spool, os.O_RDWR)
        try:
            if fd >= 0 and not lock_spool(fd, blocking=False):
                return False  # a copier is appending: the next round rotates it
            update = self._index.index_whole(step.file.kind, current)
            if update.error:
                result.warnings.append(update.error)
            target = folder / step.new_name
            if target.exists() or line_file.stored_path(target) is not None:
                return False  # another agent rotated it into this part first
            try:
                os.rename(current, target)
            except FileNotFoundError:
                return False
            warning = self._index.rename(step.file.kind, step.file.name, step.new_name)
            if warning:
                result.warnings.append(warning)
            self._move_export_cursors(step)
            return True
        finally:
            if fd >= 0:
                os.close(fd)  # releases the lock
