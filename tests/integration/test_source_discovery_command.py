"""The discovery command run for real: its list, and the last list kept when it fails."""

from __future__ import annotations

import sys

import pytest
from structlog.testing import capture_logs

from replicad.config import DiscoveryConfig
from replicad.source.discovery import DiscoveryError, discover, discovered_or

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

KNOWN = [("127.0.0.1", 3306)]


def _python(code: str, timeout_s: float = 5.0) -> DiscoveryConfig:
    return DiscoveryConfig(command=[sys.executable, "-c", code], timeout_s=timeout_s)


async def test_the_printed_list_is_used() -> None:
    config = _python("print('127.0.0.1:3310'); print('127.0.0.1:3311')")
    assert await discover(config) == [("127.0.0.1", 3310), ("127.0.0.1", 3311)]
    with capture_logs() as logs:
        assert await discovered_or(config, KNOWN) == [("127.0.0.1", 3310), ("127.0.0.1", 3311)]
    assert [e["event"] for e in logs] == ["source_discovered"]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (_python("import sys; sys.stderr.write('no quorum'); sys.exit(3)"), "exited 3: no quorum"),
        (_python("import time; time.sleep(5)", timeout_s=0.3), "no answer in 0.3 s"),
        (DiscoveryConfig(command=["/nonexistent/discover"]), "cannot run it"),
        (_python("print('primary')"), "line 1 is not host:port"),
    ],
)
async def test_a_failed_discovery_keeps_the_last_list(
    config: DiscoveryConfig, message: str
) -> None:
    with pytest.raises(DiscoveryError, match=message):
        await discover(config)
    with capture_logs() as logs:
        assert await discovered_or(config, KNOWN) == KNOWN
    (event,) = logs
    assert event["event"] == "source_discovery_failed"
    assert message in event["error"] and event["keeping"] == ["127.0.0.1:3306"]
