"""Where in the user's code a ref was created: "file.py:12 in main"."""

from __future__ import annotations

import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Modules of the package that are a user's program, not the runtime: the demo's tasks and
# objects are named by its lines, not by runpy's that started it.
_USER_CODE_IN_PACKAGE = frozenset({os.path.join(_PACKAGE_DIR, "demo.py")})


# Per file, whether it is the user's; per (file, line, function), the site's text: a
# .remote() in a loop asks about the same few frames every time, and formatting the
# text (basename, f-string) was half of what this cost. (Not keyed by code object: two
# files' identical code objects compare equal.) Cleared when full, as code made at run
# time (exec, templates) would grow them without bound.
_is_user: dict[str, bool] = {}
_sites: dict[tuple[str, int, str], str] = {}
MAX_CACHED = 4096


def user_call_site(skip: int = 1) -> str:
    """The innermost frame outside the tracedray package (cheap: no traceback objects)."""
    frame = sys._getframe(skip)
    while frame is not None:
        code = frame.f_code
        filename = code.co_filename
        user = _is_user.get(filename)
        if user is None:
            if len(_is_user) >= MAX_CACHED:
                _is_user.clear()
            user = _is_user[filename] = _is_user_code(filename)
        if user:
            key = (filename, frame.f_lineno, code.co_name)
            site = _sites.get(key)
            if site is None:
                if len(_sites) >= MAX_CACHED:
                    _sites.clear()
                site = _sites[key] = f"{os.path.basename(filename)}:{key[1]} in {key[2]}"
            return site
        frame = frame.f_back  # type: ignore[assignment]
    return "(unknown)"


def _is_user_code(filename: str) -> bool:
    return (not filename.startswith(_PACKAGE_DIR) or "/tests/" in filename
            or filename in _USER_CODE_IN_PACKAGE)
