"""Error 1236 ends a binlog dump for several reasons; each gets its own error, because each
asks for a different action (ReplicaStream._fatal_dump_error)."""

from __future__ import annotations

import pytest

from replicad.binlog.position import Position
from replicad.config import SourceConfig
from replicad.errors import ServerError
from replicad.source.stream import (
    DumpRefusedError,
    PositionLostError,
    ReplicaDisplacedError,
    ReplicaStream,
)

AT = Position("binlog.000002", 2776903)


def _classified(message: str) -> Exception:
    stream = ReplicaStream(SourceConfig(server_id=4242), "pw", pipeline="p")
    return stream._fatal_dump_error(ServerError(1236, "HY000", message), AT)


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        # MySQL 9.7's text when a new leader (the same server_id) takes the primary's dump
        (
            "A replica with the same server_uuid/server_id as this replica has connected to the "
            "source; the first event '' at 4, the last event read from '/srv/binlog.000002' at "
            "2776903",
            ReplicaDisplacedError,
        ),
        (
            "A slave with the same server_uuid/server_id as this slave has connected to the master",
            ReplicaDisplacedError,
        ),  # older servers' wording
        ("Could not find first log file name in binary log index file", PositionLostError),
        ("log event entry exceeded max_allowed_packet", DumpRefusedError),
    ],
)
def test_each_1236_gets_its_own_error(message: str, kind: type) -> None:
    error = _classified(message)
    assert type(error) is kind
    assert error.exit_code == 78  # none is fixed by retrying on its own


def test_a_displaced_dump_names_the_server_id_and_position() -> None:
    error = _classified(
        "A replica with the same server_uuid/server_id as this replica has connected to the source"
    )
    assert error.context["server_id"] == 4242
    assert error.context["position"] == str(AT)
