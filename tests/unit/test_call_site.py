"""user_call_site: the innermost frame of the user's code, skipping the runtime's own."""

from __future__ import annotations

import os

from tracedray.api import call_site


def _site_from(filename: str, inner: str | None = None) -> str:
    """The call site seen by code compiled as ``filename`` (optionally calling through
    a second frame compiled as ``inner``, as the runtime's own frames call it)."""
    namespace: dict[str, object] = {"user_call_site": call_site.user_call_site}
    if inner is not None:
        exec(compile("def through():\n    return user_call_site(1)\n", inner, "exec"), namespace)
        exec(compile("site = through()", filename, "exec"), namespace)
    else:
        exec(compile("site = user_call_site(1)", filename, "exec"), namespace)
    return str(namespace["site"])


def test_the_runtime_s_frames_are_skipped_and_the_user_s_named() -> None:
    runtime = os.path.join(call_site._PACKAGE_DIR, "core", "api.py")
    assert _site_from("/home/me/job.py", inner=runtime) == "job.py:1 in <module>"


def test_the_demo_is_the_user_s_program_not_the_runtime() -> None:
    # The demo lives in the package; its tasks must not be named after runpy's frames.
    demo = os.path.join(call_site._PACKAGE_DIR, "demo.py")
    runtime = os.path.join(call_site._PACKAGE_DIR, "core", "api.py")
    assert _site_from(demo, inner=runtime) == "demo.py:1 in <module>"


def test_each_line_is_its_own_site_and_a_full_cache_starts_over(monkeypatch) -> None:
    # Sites are cached per file, line and function: never one line's text for another.
    source = "def f():\n    a = user_call_site(1)\n    b = user_call_site(1)\n    return a, b\n"
    namespace: dict[str, object] = {"user_call_site": call_site.user_call_site}
    exec(compile(source + "sites = f()", "/home/me/job.py", "exec"), namespace)
    assert namespace["sites"] == ("job.py:2 in f", "job.py:3 in f")
    monkeypatch.setattr(call_site, "MAX_CACHED", 1)
    exec(compile(source + "sites = f()", "/home/me/other.py", "exec"), namespace)
    assert namespace["sites"] == ("other.py:2 in f", "other.py:3 in f")
    assert len(call_site._sites) == 1
