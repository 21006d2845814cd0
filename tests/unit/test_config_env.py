"""REPLICAD_CONFIG names the config file of a command given no -c; -c wins over it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _replicad(*args: str, config_env: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REPLICAD_")}
    if config_env is not None:
        env["REPLICAD_CONFIG"] = config_env
    return subprocess.run(
        [sys.executable, "-m", "replicad.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _config(path: Path, pipeline: str) -> Path:
    path.write_text(f"pipeline: {pipeline}\ncoordination: {{local: {{path: {path}.pos}}}}\n")
    return path


def test_the_variable_is_the_config_and_c_wins(tmp_path: Path) -> None:
    named = _config(tmp_path / "env.yaml", "from-env")
    given = _config(tmp_path / "given.yaml", "from-c")
    by_env = _replicad("status", config_env=str(named))
    assert by_env.returncode == 0 and "pipeline from-env" in by_env.stdout, by_env
    by_option = _replicad("status", "-c", str(given), config_env=str(named))
    assert by_option.returncode == 0 and "pipeline from-c" in by_option.stdout, by_option
    unset = _replicad("status", config_env=None)
    assert "pipeline default" in unset.stdout, unset  # the built-in defaults


def test_a_missing_file_it_names_is_a_config_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.yaml")
    for command in ("status", "invalidate"):  # invalidate requires -c unless the variable is set
        result = _replicad(command, config_env=missing)
        assert result.returncode == 78, (command, result)
        assert "nope.yaml" in result.stderr and "Traceback" not in result.stderr
