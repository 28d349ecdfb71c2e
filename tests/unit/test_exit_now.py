"""exit_now ends the process even when its record cannot be written (a real process)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

CHILD = textwrap.dedent("""
    import shutil, sys, threading, time
    from pathlib import Path
    from tracedray.core.process import exit_now, setup_process

    session = Path(sys.argv[1])
    (session / "logs").mkdir(parents=True)
    setup_process("gcs", session_dir=session, config={}, ip="127.0.0.1")
    shutil.rmtree(session)  # the cluster's folder removed while the process stops
    # As exit_with_parent does: from a thread, while the main thread waits on.
    threading.Thread(target=exit_now, args=(3,), daemon=True).start()
    time.sleep(30)
    sys.exit(0)
""")


def test_exit_now_ends_the_process_when_its_session_folder_is_gone(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / "session")],
                          capture_output=True, text=True, timeout=20)
    assert done.returncode == 3, done.stderr[-2000:]
