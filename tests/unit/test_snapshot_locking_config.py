"""snapshot.locking / lock_timeout_s (docs/snapshots.md): the global read lock of a MySQL
consistent snapshot is opt-in, and asking for it where it would do nothing is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicad.config import load_config
from replicad.errors import ConfigError

pytestmark = pytest.mark.unit


def _load(tmp_path: Path, snapshot: str):
    path = tmp_path / "c.yaml"
    path.write_text(f"snapshot: {snapshot}\n")
    return load_config(path, {})


def test_no_lock_unless_asked(tmp_path: Path) -> None:
    config = _load(tmp_path, "{mode: initial, initial_method: consistent}")
    assert config.snapshot.locking == "none"
    assert config.snapshot.lock_timeout_s == 10


def test_minimal_locking_with_a_consistent_snapshot(tmp_path: Path) -> None:
    config = _load(
        tmp_path, "{mode: initial, initial_method: consistent, locking: minimal, lock_timeout_s: 3}"
    )
    assert (config.snapshot.locking, config.snapshot.lock_timeout_s) == ("minimal", 3)


@pytest.mark.parametrize("method", ["auto", "watermarks"])
def test_minimal_locking_without_a_consistent_snapshot_is_refused(
    tmp_path: Path, method: str
) -> None:
    """`auto` is watermarks on MySQL: the lock asked for would silently never be taken."""
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, f"{{mode: initial, initial_method: {method}, locking: minimal}}")
    assert "initial_method: consistent" in str(err.value) and "snapshot" in str(err.value)


@pytest.mark.parametrize(
    "snapshot",
    [
        "{initial_method: consistent, locking: extended}",  # Debezium's other modes: not here
        "{initial_method: consistent, locking: minimal, lock_timeout_s: 0}",
        "{initial_method: consistent, locking: minimal, lock_timeout_s: 1.5}",
    ],
)
def test_bad_locking_values_are_refused(tmp_path: Path, snapshot: str) -> None:
    with pytest.raises(ConfigError):
        _load(tmp_path, snapshot)
