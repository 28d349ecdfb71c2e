"""Where in the user's code a ref was created: "file.py:12 in main"."""

from __future__ import annotations

import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Modules of the package that are a user's program, not the runtime: the demo's tasks and
# objects are named by its lines, not by runpy's that started it.
_USER_CODE_IN_PACKAGE = frozenset({os.path.join(_PACKAGE_DIR, "demo.py")})


def user_call_site(skip: int = 1) -> str:
    """The innermost frame outside the tracedray package (cheap: no traceback objects)."""
    frame = sys._getframe(skip)
    while frame is not None:
        filename = frame.f_code.co_filename
        if (not filename.startswith(_PACKAGE_DIR) or "/tests/" in filename
                or filename in _USER_CODE_IN_PACKAGE):
            return f"{os.path.basename(filename)}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back  # type: ignore[assignment]
    return "(unknown)"
