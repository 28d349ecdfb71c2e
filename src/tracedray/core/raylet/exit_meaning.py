"""What a worker's exit code or signal usually means, in words a user can act on."""

from __future__ import annotations

import signal

_SIGNAL_MEANINGS = {
    "SIGKILL": "killed by the OS, often the OOM killer (or `kill -9`)",
    "SIGSEGV": "a crash in native code (segmentation fault in a C extension?)",
    "SIGABRT": "aborted by native code (a failed assertion in a C extension?)",
    "SIGTERM": "asked to terminate (shutdown, or `kill`)",
    "SIGBUS": "a bus error in native code (memory-mapped file truncated?)",
    "SIGFPE": "a floating point exception in native code",
    "SIGILL": "an illegal instruction (binary built for another CPU?)",
    "SIGINT": "interrupted (Ctrl-C)",
}


def describe_exit(returncode: int) -> tuple[int, str, str]:
    """From a Popen returncode: (shell-style exit code, signal name or "", meaning)."""
    if returncode < 0:
        signum = -returncode
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        return 128 + signum, name, _SIGNAL_MEANINGS.get(name, "terminated by a signal")
    if returncode == 0:
        return 0, "", "exited normally"
    if returncode > 128 and returncode - 128 < 65:
        code, name, meaning = describe_exit(-(returncode - 128))
        return returncode, name, meaning
    if returncode == 1:
        return 1, "", "exited with an error (os._exit(1), sys.exit(1) or an uncaught exception)"
    return returncode, "", f"exited with status {returncode} (os._exit / sys.exit in user code?)"
