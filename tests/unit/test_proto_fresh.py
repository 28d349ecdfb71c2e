"""Generated code in src/tracedray/_proto/v1 matches proto/ (regenerate: scripts/gen_proto.sh)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_code_is_fresh(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable}
    subprocess.run(["bash", str(ROOT / "scripts" / "gen_proto.sh"), str(tmp_path)], check=True,
                   env=env)
    fresh = tmp_path / "tracedray" / "_proto" / "v1"
    generated = sorted(p.name for p in fresh.glob("*_pb2*.py*"))
    assert generated, "the generator produced nothing"
    stale = [name for name in generated
             if (fresh / name).read_bytes()
             != (ROOT / "src" / "tracedray" / "_proto" / "v1" / name).read_bytes()]
    assert not stale, f"stale generated code, run scripts/gen_proto.sh: {stale}"
