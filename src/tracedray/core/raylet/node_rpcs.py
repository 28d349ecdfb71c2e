"""The raylet's node RPCs: its report, its shutdown, its session files, its stacks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import grpc

from tracedray._proto.v1 import common_pb2, raylet_pb2
from tracedray.exceptions import SessionFileCorruptError
from tracedray.telemetry.append_file import read_data
from tracedray.telemetry.line_file import line_files
from tracedray.telemetry.line_spool import sync_lines_dir
from tracedray.telemetry.spool_convert import sync_traces_dir

if TYPE_CHECKING:
    from tracedray.core.raylet.server import Raylet


class NodeRpcs:
    _r: Raylet

    def GetNodeStats(self, request: Any, context: Any) -> Any:
        return self._r.reports.node_stats(request)

    def ShutdownNode(self, request: Any, context: Any) -> Any:
        self._r.exit_soon(0)
        return common_pb2.Empty()

    def ReadSessionFiles(self, request: Any, context: Any) -> Any:
        folder = self._r.session_dir / request.subdir
        if request.subdir not in ("logs", "traces") or not folder.is_dir():
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"no such folder {request.subdir!r}")
        if request.subdir == "traces":
            sync_traces_dir(folder)  # every span that had ended, not only what the agent did
        if request.keys:  # the matching lines alone, found through the node's index
            # Imported here: an idle raylet never loads sqlite (~1.5 MB of RSS).
            from tracedray.telemetry.index_reader import matching_lines

            if request.subdir == "logs":
                sync_lines_dir(folder)  # every line that was logged
            by_file: dict[str, list[bytes]] = {}
            for name, line in matching_lines(self._r.session_dir, request.subdir,
                                             request.keys):
                by_file.setdefault(name, []).append(line)
            for name, lines in by_file.items():
                yield raylet_pb2.FileChunk(name=name, data=b"\n".join(lines) + b"\n")
            return
        # Rotated parts too, uncompressed (telemetry/line_file.py), oldest first; a
        # damaged part is left out and the caller told which.
        for path in line_files(folder):
            try:
                # Without the NUL tail a live writer reserves (telemetry/append_file.py).
                data = read_data(path)
            except FileNotFoundError:
                continue  # dropped by retention since it was listed
            except SessionFileCorruptError as exc:
                context.abort(grpc.StatusCode.DATA_LOSS, str(exc))
            yield raylet_pb2.FileChunk(name=path.name, data=data)

    def DumpNodeStacks(self, request: Any, context: Any) -> Any:
        return self._r.reports.dump_stacks(request)
