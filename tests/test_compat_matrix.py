"""The compatibility matrix's reading of this machine's pip configuration (scripts/compat_matrix.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from compat_matrix import machine_cap  # noqa: E402


def test_a_pip_constraint_that_caps_a_package_is_named_with_its_file(tmp_path, monkeypatch):
    """Why `newest-torch` got torch 2.14.1 where the registry had 2.15.0: a constraint file in pip's config."""
    caps = tmp_path / "constraints.txt"
    caps.write_text("# the machine's wheels\ntorchvision<=0.29.1\ntorch<=2.14.1\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # this machine's own pip.conf left out: only the variable
    monkeypatch.setenv("PIP_CONSTRAINT", str(caps))
    assert machine_cap(Path(sys.executable), "torch") == f"{caps}: torch<=2.14.1"
    assert machine_cap(Path(sys.executable), "torchvision") == f"{caps}: torchvision<=0.29.1"
    assert machine_cap(Path(sys.executable), "transformers") == ""
    monkeypatch.setenv("PIP_CONSTRAINT", str(tmp_path / "missing.txt"))  # a configured file that is gone: no cap
    assert machine_cap(Path(sys.executable), "torch") == ""
