"""A command whose optional dependency is not installed stops with one line naming the extra
(pyproject's `invalidate` and `mqtt`), exit 78, instead of an ImportError's traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# The packages hidden as if not installed: None in sys.modules makes `import` fail.
SCRIPT = """
import sys
for name in {hidden!r}:
    sys.modules[name] = None
from replicad.errors import ConfigError
try:
    import {module}
except ConfigError as exc:
    print(exc.exit_code, exc)
"""


@pytest.mark.parametrize(
    ("module", "hidden", "extra", "key"),
    [
        ("replicad.sinks.mqtt", ["aiomqtt"], "mqtt", "sinks.mqtt"),
        ("replicad.invalidate.run", ["redis"], "invalidate", "invalidate"),
        ("replicad.invalidate.redis_target", ["redis"], "invalidate", "invalidate"),
    ],
)
def test_a_missing_extra_is_named(module: str, hidden: list[str], extra: str, key: str) -> None:
    script = SCRIPT.format(hidden=hidden, module=module)
    proc = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("78 "), proc.stdout
    assert f"pip install 'replicad[{extra}]'" in proc.stdout
    assert key in proc.stdout
