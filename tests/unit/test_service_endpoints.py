"""The health endpoint and sd_notify without any server: a real HTTP listener on a free port
and a real AF_UNIX datagram socket standing in for systemd's."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from replicad.config import ConfigError, MetricsConfig
from replicad.published.http import Endpoints, beat, parse_listen
from replicad.service.notify import Notifier
from replicad.service.telemetry import Telemetry
from tests.helpers.http import http_json


def test_healthz_fails_while_the_event_loop_is_blocked() -> None:
    async def scenario() -> list[tuple[int, dict]]:
        telemetry = Telemetry()
        endpoints = Endpoints(telemetry, "127.0.0.1:0", loop_stall_s=0.6)
        endpoints.start()
        beating = asyncio.create_task(beat(telemetry))
        url = f"http://127.0.0.1:{endpoints.port}/healthz"
        seen: list[tuple[int, dict]] = []
        try:
            seen.append(await asyncio.to_thread(http_json, url))
            # Block the loop (as a hung client library would) and probe from a thread.
            probe: list[tuple[int, dict]] = []
            prober = threading.Timer(1.5, lambda: probe.append(http_json(url)))
            prober.start()
            time.sleep(2.0)  # the event loop runs nothing meanwhile
            prober.join()
            seen.extend(probe)
            await asyncio.sleep(0.7)  # the loop beats again
            seen.append(await asyncio.to_thread(http_json, url))
        finally:
            beating.cancel()
            endpoints.stop()
        return seen

    before, blocked, after = asyncio.run(scenario())
    assert before[0] == 200 and before[1]["status"] == "ok"
    assert blocked[0] == 503 and blocked[1]["status"] == "stalled"
    assert blocked[1]["loop_stalled_s"] >= 1.0
    assert after[0] == 200


def test_readyz_is_not_ready_without_pipelines_and_metrics_are_served() -> None:
    async def scenario() -> tuple[tuple[int, dict], str, tuple[int, dict]]:
        telemetry = Telemetry()
        endpoints = Endpoints(telemetry, "127.0.0.1:0", loop_stall_s=5)
        endpoints.start()
        base = f"http://127.0.0.1:{endpoints.port}"
        try:
            empty = await asyncio.to_thread(http_json, base + "/readyz")
            telemetry.set_role("p1", "starting")
            text = await asyncio.to_thread(
                lambda: urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
            )
            starting = await asyncio.to_thread(http_json, base + "/readyz")
        finally:
            endpoints.stop()
        return empty, text, starting

    empty, text, starting = asyncio.run(scenario())
    assert empty[0] == 503
    assert starting[0] == 503 and starting[1]["pipelines"]["p1"]["problem"] == "starting"
    assert 'replicad_role{pipeline="p1",role="starting"} 1.0' in text
    assert "replicad_ready 0.0" in text
    assert "_created" not in text


def test_a_taken_port_is_a_clear_error() -> None:
    async def scenario() -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            port = taken.getsockname()[1]
            Endpoints(Telemetry(), f"127.0.0.1:{port}", 5).start()

    with pytest.raises(ConfigError) as info:
        asyncio.run(scenario())
    assert "metrics.listen" in str(info.value)


def test_an_ipv6_listener_answers() -> None:
    endpoints = Endpoints(Telemetry(), "[::1]:0", 5)
    endpoints.start()
    try:
        status, body = http_json(f"http://[::1]:{endpoints.port}/healthz")
    finally:
        endpoints.stop()
    assert status == 200 and body["status"] == "ok"


def test_listen_forms() -> None:
    assert parse_listen("127.0.0.1:9108") == ("127.0.0.1", 9108)
    assert parse_listen("[::1]:9108") == ("::1", 9108)
    assert parse_listen(":9108") == ("0.0.0.0", 9108)
    with pytest.raises(ValueError):
        MetricsConfig(listen="9108")


def _receiver(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(5)
    return sock


def test_notify_ready_watchdog_status_and_stopping(tmp_path: Path) -> None:
    sock = _receiver(tmp_path / "notify")
    env = {"NOTIFY_SOCKET": str(tmp_path / "notify"), "WATCHDOG_USEC": "200000"}
    messages: list[str] = []

    def receive() -> None:  # as systemd does: a datagram queue holds only ~10
        sock.settimeout(2.0)  # the scenario's gaps are far shorter: 2 s quiet means it ended
        while True:
            try:
                messages.append(sock.recv(4096).decode())
            except TimeoutError:
                return

    receiver = threading.Thread(target=receive)
    receiver.start()

    async def scenario() -> None:
        telemetry = Telemetry()
        notifier = Notifier(env)
        notifier.start(telemetry)
        await asyncio.sleep(0.5)  # starting: no READY yet
        assert not notifier.ready_sent
        telemetry.set_role("p1", "standby")
        await asyncio.sleep(0.6)
        notifier.stopping()
        await notifier.close()

    asyncio.run(scenario())
    receiver.join()
    sock.close()
    lines = [line for m in messages for line in m.split("\n")]
    assert lines.count("READY=1") == 1
    # every 0.1 s for ~1.1 s
    assert lines.count("WATCHDOG=1") >= 6, messages
    assert "STATUS=p1: standby; 1 standby" in lines
    assert lines.index("READY=1") > lines.index("STATUS=p1: standby; 1 standby")
    assert lines[-2:] == ["STOPPING=1", "STATUS=stopping: finishing the transaction in flight"]


def test_notify_abstract_socket_and_no_socket() -> None:
    name = f"replicad-test-{time.monotonic_ns()}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    sock.settimeout(5)
    Notifier({"NOTIFY_SOCKET": "@" + name}).send("READY=1")
    assert sock.recv(100) == b"READY=1"
    sock.close()
    quiet = Notifier({})
    assert not quiet.enabled
    quiet.send("READY=1")  # nothing to send to, no error


def test_watchdog_pid_of_another_process_is_not_ours(tmp_path: Path) -> None:
    notifier = Notifier(
        {"NOTIFY_SOCKET": str(tmp_path / "n"), "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"}
    )
    assert notifier.watchdog_s is None


def test_a_receiver_that_does_not_read_never_blocks_the_sender(tmp_path: Path) -> None:
    sock = _receiver(tmp_path / "full")  # never read: its queue fills after ~10 datagrams
    notifier = Notifier({"NOTIFY_SOCKET": str(tmp_path / "full")})
    # In a thread: a blocking send would hang the test instead of failing it.
    sender = threading.Thread(target=lambda: [notifier.send("WATCHDOG=1") for _ in range(100)])
    sender.daemon = True
    sender.start()
    sender.join(5.0)
    assert not sender.is_alive(), "sending blocked on a full queue"
    sock.close()
