"""What deploy/Dockerfile's builder stage does, done here without a container engine: build
replicad's wheel with the pinned build tools (deploy/constraints.txt) and check it with the
same script the image build runs (deploy/check_wheel.py): it must carry the compiled row
decoder, and that extension must import from the wheel's own files."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_wheel_is_built_with_the_compiled_decoder(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--quiet",
            "--build-constraint",
            str(ROOT / "deploy/constraints.txt"),
            "--wheel-dir",
            str(wheels),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr[-4000:]
    check = subprocess.run(
        [sys.executable, str(ROOT / "deploy/check_wheel.py"), str(wheels)],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert "_speedups" in check.stdout and "_writer" in check.stdout

    # the extension loads from the wheel's files (not from this checkout)
    unpacked = tmp_path / "unpacked"
    (wheel,) = wheels.glob("replicad-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(unpacked)
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import replicad, replicad.binlog._speedups as s; "
            "from replicad.binlog import decoder_choice as d; print(s.__file__, d.available())",
        ],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(unpacked)},
        capture_output=True,
        text=True,
    )
    assert probe.returncode == 0, probe.stderr
    location, available = probe.stdout.split()
    assert location.startswith(str(unpacked)) and available == "True", probe.stdout
