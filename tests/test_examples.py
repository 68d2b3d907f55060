"""The README's commands run as written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_quickstart_runs_and_round_trips(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "quickstart.py"), "--output-dir", str(tmp_path / "quickstart")],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert "reloaded: same beams" in result.stdout
    assert "identical greedy output = True" in result.stdout
    assert (tmp_path / "quickstart" / "model.safetensors").exists()
