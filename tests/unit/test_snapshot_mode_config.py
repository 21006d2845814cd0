"""snapshot.mode (docs/snapshots.md, "Snapshot modes"): Debezium's names, its old
`schema_only` accepted with a warning, and the combinations that cannot work refused when the
configuration is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicad.config import load_config
from replicad.errors import ConfigError

pytestmark = pytest.mark.unit

MODES = ["never", "initial", "initial_only", "no_data", "when_needed", "always", "recovery"]


def _load(tmp_path: Path, text: str):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return load_config(path, {})


@pytest.mark.parametrize("mode", MODES)
def test_every_debezium_mode_is_accepted(tmp_path: Path, mode: str) -> None:
    assert _load(tmp_path, f"snapshot: {{mode: {mode}}}\n").snapshot.mode == mode


def test_schema_only_is_no_data_with_a_warning(tmp_path: Path) -> None:
    with pytest.warns(FutureWarning, match="schema_only is Debezium's old name for no_data"):
        config = _load(tmp_path, "snapshot: {mode: schema_only}\n")
    assert config.snapshot.mode == "no_data"


@pytest.mark.parametrize("mode", ["schema_only_recovery", "configuration_based", "Initial"])
def test_modes_replicad_does_not_have_are_refused(tmp_path: Path, mode: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, f"snapshot: {{mode: {mode}}}\n")
    assert "snapshot.mode" in str(err.value)


def test_initial_only_with_watermarks_is_refused(tmp_path: Path) -> None:
    """Watermarks read while the stream runs: no point at which to stop without streaming."""
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, "snapshot: {mode: initial_only, initial_method: watermarks}\n")
    assert "initial_only" in str(err.value) and "watermarks" in str(err.value)


@pytest.mark.parametrize("mode", ["never", "recovery"])
def test_modes_that_read_nothing_may_start_elsewhere(tmp_path: Path, mode: str) -> None:
    text = f"snapshot: {{mode: {mode}}}\nsource: {{start: {{file: b.000001, pos: 4}}}}\n"
    assert _load(tmp_path, text).snapshot.mode == mode


@pytest.mark.parametrize("mode", ["initial", "initial_only", "no_data", "when_needed", "always"])
def test_modes_that_start_at_the_snapshot_need_start_latest(tmp_path: Path, mode: str) -> None:
    text = f"snapshot: {{mode: {mode}}}\nsource: {{start: {{file: b.000001, pos: 4}}}}\n"
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, text)
    assert "source.start" in str(err.value)
