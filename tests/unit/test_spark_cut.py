"""Choosing each Delta table's version at a position from its commits' recorded coordinates
(replicad/spark/cut.py), and the through-position a batch may claim (complete.py)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from replicad.spark.complete import Completeness, Sample, batch_end, offset_log, reaches
from replicad.spark.cut import (
    Commit,
    CutError,
    commit_metadata,
    cut,
    cut_lake,
    latest,
    parse_position,
    version_at,
)

F = "bin.000001"


def data(version: int, low: int, high: int, through: int | None = None) -> Commit:
    return Commit(version, None if through is None else (F, through), (F, low), (F, high))


# Version 0 creates the table; 1 holds changes at 100..200, 2 at 300..400 (complete through
# 250 when written), 3 at 500..600 (complete through 450).
TABLE = [Commit(0), data(1, 100, 200), data(2, 300, 400, 250), data(3, 500, 600, 450)]


def test_the_version_between_two_batches_when_a_later_commit_proves_it() -> None:
    assert version_at("t", TABLE, (F, 250)) == 1  # 1 holds everything before 250; 2 proves it
    assert version_at("t", TABLE, (F, 450)) == 2  # 3 proves 450; 3's changes are all after
    assert version_at("t", TABLE, (F, 300)) == 1  # a change AT the position is after it
    assert version_at("t", TABLE, (F, 50)) == 0  # nothing before 50: the empty table


def test_a_position_inside_a_batch_has_no_version() -> None:
    with pytest.raises(CutError, match="both sides") as caught:
        version_at("t", TABLE, (F, 350))
    assert "table=t" in str(caught.value)


def test_a_position_not_proven_yet_names_the_table() -> None:
    with pytest.raises(CutError, match="not proven") as caught:
        version_at("shop.a", TABLE, (F, 700))  # 3 holds everything before 700, unproven
    assert "shop.a" in str(caught.value) and "complete_through=bin.000001:450" in str(caught.value)


def test_the_highest_coordinates_are_cumulative() -> None:
    # Version 2's batch (another partition) ends before version 1's: version 2 still holds
    # version 1's change at 500, so it is not at 450.
    commits = [Commit(0), data(1, 100, 500), data(2, 300, 400, 900)]
    with pytest.raises(CutError):
        version_at("t", commits, (F, 450))


def test_commits_without_coordinates_change_nothing() -> None:
    commits = [Commit(0), data(1, 100, 200), Commit(2), data(3, 300, 400, 250)]
    assert version_at("t", commits, (F, 250)) == 2  # the ADD COLUMNS after version 1


def test_a_log_cleaned_up_to_a_later_version_is_refused() -> None:
    with pytest.raises(CutError, match="does not start at version 0"):
        version_at("t", TABLE[1:], (F, 250))


def test_positions_compare_by_file_then_pos() -> None:
    commits = [Commit(0), data(1, 100, 200), Commit(2, ("bin.000002", 4))]
    assert version_at("t", commits, ("bin.000002", 4)) == 2
    assert version_at("t", commits, ("bin.000001", 201)) == 2


def test_a_cut_names_every_table_and_latest_is_common_to_all() -> None:
    other = [Commit(0), data(1, 120, 260, 90), data(2, 310, 420, 300)]
    lake = {"d.a": TABLE, "d.b": other}
    assert cut(lake, (F, 300)) == {"d.a": 1, "d.b": 1}
    # 450 is proven for d.a only, 300 for both; 250 too, but older.
    assert latest(lake) == ((F, 300), {"d.a": 1, "d.b": 1})
    with pytest.raises(CutError, match=r"d\.b"):
        cut(lake, (F, 450))


def test_metadata_round_trips_and_foreign_metadata_is_no_change() -> None:
    text = commit_metadata((F, 250), [F, 300, 0], [F, 400, 2])
    assert Commit.of(5, text) == Commit(5, (F, 250), (F, 300), (F, 400))
    assert Commit.of(6, None) == Commit(6)
    assert Commit.of(7, "nightly compaction") == Commit(7)
    assert Commit.of(8, '{"owner": "me"}') == Commit(8)


@pytest.mark.parametrize("text", ["bin.000001", "bin.000001:x", ":4", "4"])
def test_a_position_is_file_colon_pos(text: str) -> None:
    with pytest.raises(CutError, match="FILE:POS"):
        parse_position(text)


def test_cut_lake_reads_the_delta_logs(tmp_path: Path) -> None:
    for table, commits in {"a": TABLE, "b": TABLE}.items():
        log = tmp_path / "shop" / table / "_delta_log"
        log.mkdir(parents=True)
        for commit in commits:
            info: dict = {"operation": "MERGE"}
            if commit.high is not None:
                assert commit.low is not None
                info["userMetadata"] = commit_metadata(
                    commit.through, [*commit.low, 0], [*commit.high, 0]
                )
            lines = [orjson.dumps({"commitInfo": info}), orjson.dumps({"add": {"path": "x"}})]
            (log / f"{commit.version:020d}.json").write_bytes(b"\n".join(lines))
    found = cut_lake(tmp_path, "latest")
    assert found["position"] == f"{F}:450"
    assert {t: v["version"] for t, v in found["tables"].items()} == {"shop.a": 2, "shop.b": 2}
    assert cut_lake(tmp_path, f"{F}:250")["tables"]["shop.b"]["version"] == 1


# ---------------------------------------------------------------------- completeness


def test_a_batch_claims_the_newest_sample_it_reaches() -> None:
    positions = iter([(F, 10), (F, 20), (F, 30)])
    ends = iter([{0: 5, 1: 0}, {0: 8, 1: 3}, {0: 12, 1: 3}])
    done = Completeness(lambda: next(positions), lambda: next(ends))
    done.sample()
    done.sample()
    assert done.through({0: 4, 1: 9}) is None  # partition 0 not reached by any sample
    assert done.through({0: 9, 1: 3}) == (F, 20)
    done.sample()
    assert done.through({0: 11, 1: 3}) is None  # capped below the newest sample's end
    assert done.through({0: 12, 1: 3}) == (F, 30)
    assert done.through(None) is None


def test_reaches_needs_every_partition() -> None:
    assert reaches({0: 3, 1: 4}, Sample((F, 1), {0: 3, 1: 4}))
    assert not reaches({0: 3}, Sample((F, 1), {0: 3, 1: 4}))
    assert reaches({0: 3}, Sample((F, 1), {0: 3, 1: 0}))


def test_batch_end_reads_the_offset_log() -> None:
    text = 'v1\n{"batchWatermarkMs":0}\n{"p.shop.a":{"1":40,"0":12}}\n'
    assert batch_end(text, "p.shop.a") == {0: 12, 1: 40}
    assert batch_end(text, "p.shop.b") is None
    assert batch_end(None, "p.shop.a") is None
    assert offset_log("s3a://lake/cp/", 7) == "s3a://lake/cp/offsets/7"
