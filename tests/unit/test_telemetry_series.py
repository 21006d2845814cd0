"""Series every scrape carries whatever the pipeline does: the source connection gauge and
the standard process/Python collectors (a custom registry has none of them by itself)."""

from __future__ import annotations

from prometheus_client import generate_latest

from replicad.service.telemetry import Telemetry
from tests.helpers.http import sample


def test_a_standby_reports_no_source_connection() -> None:
    telemetry = Telemetry()
    telemetry.set_role("orders", "standby")
    text = generate_latest(telemetry.registry).decode()
    assert sample(text, "replicad_source_connected", pipeline="orders") == 0


def test_the_daemon_serves_the_process_series() -> None:
    # (the invalidator's: tests/integration/test_invalidate.py)
    text = generate_latest(Telemetry().registry).decode()
    assert sample(text, "process_cpu_seconds_total") is not None
    assert sample(text, "process_resident_memory_bytes") is not None
    assert "python_info{" in text
