"""`sinks.mqtt` beyond the plain listener (docs/mqtt.md), against private mosquittos of the
test's own (ports 16500-16599): TLS with the test's CA (and a CA that did not sign the
broker's certificate: exit 78), `envelope: true` beside Kafka (each notice is the Kafka
message value of its change), and back-pressure against a broker frozen with SIGSTOP (at most
`max_in_flight` notices unacknowledged, the position held, nothing lost after SIGCONT)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid

import orjson
import pytest

from tests.helpers.daemon_process import ROOT, wait_for
from tests.helpers.invalidate import free_port
from tests.helpers.kafka_helpers import consume_all
from tests.helpers.kafka_run import gtid_reached, master_gtid
from tests.helpers.mqtt import Mosquitto, Subscriber, coordinates, mqtt_daemon, write_rows
from tests.helpers.pki import server_pki

pytestmark = pytest.mark.integration


def _reached(daemon, target: str) -> bool:
    return gtid_reached((daemon.position() or {}).get("mariadb_gtid"), target)


def test_tls_notices_arrive_and_an_unknown_ca_stops_the_daemon_with_78(db, tmp_path) -> None:
    conn, name = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE m (id INT PRIMARY KEY, v INT)")
    conn.commit()
    pki = server_pki(tmp_path / "pki")
    broker = Mosquitto(tmp_path / "mosquitto", port=free_port(), tls=(pki.cert, pki.key))
    prefix = f"t{uuid.uuid4().hex[:6]}"
    daemon = mqtt_daemon(
        tmp_path / "replicad",
        broker.port,
        prefix,
        name,
        f", tls: true, tls_ca: '{pki.ca}'",
        server_id=7621,
    )
    broker.up()
    subscriber: Subscriber | None = None
    try:
        subscriber = Subscriber(broker.port, f"{prefix}/#", ca=pki.ca)
        daemon.start()
        write_rows(conn, 0, 30)
        target = master_gtid()
        wait_for(lambda: _reached(daemon, target), 30, "the position to pass every change")
        wanted = {coordinates(m) for m in daemon.messages()}
        assert len(wanted) == 30 * 2 + 10
        wait_for(lambda: subscriber.seen() >= wanted, 30, "a notice for every change")
        assert subscriber.seen() == wanted
        assert daemon.stop() == 0

        # The same broker, a CA that did not sign its certificate: 78, naming host and port.
        wrong = mqtt_daemon(
            tmp_path / "wrong-ca",
            broker.port,
            prefix,
            name,
            f", tls: true, tls_ca: '{pki.other_ca}'",
            server_id=7622,
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "replicad.cli", "run", "-c", str(wrong.config)],
            cwd=ROOT,
            env=wrong.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            time.sleep(1.0)
            write_rows(conn, 100, 1)  # a notice to send
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        text = err.decode()
        assert proc.returncode == 78, text[-2000:]
        assert "sinks.mqtt" in text and "certificate" in text, text[-2000:]
        assert f"port={broker.port}" in text and "host=127.0.0.1" in text, text[-2000:]
    finally:
        if subscriber is not None:
            subscriber.stop()
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.proc.kill()
        broker.down()


def test_envelope_notices_equal_the_kafka_values(db, kafka, tmp_path) -> None:
    """With `envelope: true` beside the Kafka sink, each notice is the value Kafka got for
    the same change (primary-key change, delete and TRUNCATE included), but for the
    envelope's top-level `ts_ms`/`ts_us`/`ts_ns`, each sink's own processing time."""
    conn, name = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE m (id INT PRIMARY KEY, v INT, note VARCHAR(20), d DECIMAL(6,2))")
    conn.commit()
    broker = Mosquitto(tmp_path / "mosquitto", port=free_port())
    prefix = f"e{uuid.uuid4().hex[:6]}"
    daemon = mqtt_daemon(
        tmp_path / "replicad",
        broker.port,
        prefix,
        name,
        ", envelope: true",
        server_id=7623,
        sinks_extra=f"\n  kafka: {{bootstrap_servers: '{kafka}', prefix: {prefix}}}",
    )
    broker.up()
    subscriber: Subscriber | None = None
    try:
        subscriber = Subscriber(broker.port, f"{prefix}/#")
        daemon.start()
        with conn.cursor() as cur:
            cur.execute(
                "INSERT INTO m VALUES (1, 0, 'a', 1.50), (2, 0, NULL, -2.25), (3, 1, 'ü', 0)"
            )
            cur.execute("UPDATE m SET v = v + 1, note = 'b' WHERE id = 1")
            cur.execute("UPDATE m SET id = 20 WHERE id = 2")  # a delete and a create
            cur.execute("DELETE FROM m WHERE id = 3")
        conn.commit()
        with conn.cursor() as cur:
            cur.execute("TRUNCATE TABLE m")
            cur.execute("INSERT INTO m VALUES (4, 4, 'after', 4.00)")
        conn.commit()
        target = master_gtid()
        wait_for(lambda: _reached(daemon, target), 30, "the position to pass every change")
        records = [
            r for r in consume_all(kafka, [f"{prefix}.{name}.m"], idle_s=2.0) if r.value is not None
        ]

        def by_change(values: list[dict]) -> dict[tuple, dict]:
            out = {}
            for value in values:
                value = dict(value)
                for clock in ("ts_ms", "ts_us", "ts_ns"):  # each sink's own processing time
                    value.pop(clock, None)
                out[coordinates(value)] = value
            return out

        kafka = by_change([orjson.loads(r.value) for r in records])
        assert {c[0] for c in kafka} == {"c", "u", "d", "t"} and len(kafka) == 9
        wait_for(lambda: len(subscriber.notices) >= len(kafka), 30, "a notice per change")
        with subscriber.lock:
            notices = by_change(subscriber.notices)
        assert notices == kafka
        assert daemon.stop() == 0
    finally:
        if subscriber is not None:
            subscriber.stop()
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.proc.kill()
        broker.down()


MAX_IN_FLIGHT = 5


def test_a_frozen_broker_holds_the_pipeline_at_max_in_flight_and_nothing_is_lost(
    db, tmp_path
) -> None:
    """mosquitto SIGSTOPped: the TCP connection stays up but nothing is acknowledged. The
    daemon takes at most `max_in_flight` notices (the JSON-lines sink beside it shows how
    far the pipeline got), logs the back-pressure, keeps its position; after SIGCONT every
    change has its notice."""
    conn, name = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE m (id INT PRIMARY KEY, v INT)")
    conn.commit()
    broker = Mosquitto(tmp_path / "mosquitto", port=free_port())
    prefix = f"b{uuid.uuid4().hex[:6]}"
    metrics_port = free_port()
    metrics_yaml = f"metrics: {{listen: '127.0.0.1:{metrics_port}'}}\n"
    daemon = mqtt_daemon(
        tmp_path / "replicad",
        broker.port,
        prefix,
        name,
        f", max_in_flight: {MAX_IN_FLIGHT}",
        server_id=7624,
        extra_yaml=metrics_yaml,
    )
    broker.up()
    subscriber: Subscriber | None = None
    frozen = False
    try:
        subscriber = Subscriber(broker.port, f"{prefix}/#")
        daemon.start()
        write_rows(conn, 0, 10)
        before = master_gtid()
        wait_for(lambda: _reached(daemon, before), 30, "the first changes to be acknowledged")
        position = daemon.position()
        assert not daemon.count("mqtt_backpressure")

        os.kill(broker.pid(), signal.SIGSTOP)
        frozen = True
        write_rows(conn, 10, 40)  # 117 changes
        wait_for(lambda: daemon.count("mqtt_backpressure") > 0, 10, "the back-pressure line")
        time.sleep(0.5)
        # The pipeline stopped reading with max_in_flight notices taken, none acknowledged,
        # and the position did not pass any of them.
        (line,) = [e for e in daemon.log_events() if e["event"] == "mqtt_backpressure"]
        assert line["unacknowledged"] + line["queued"] == MAX_IN_FLIGHT, line
        assert daemon.position() == position
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics") as response:
            metrics = response.read().decode()
        assert (
            f'replicad_sink_queued_messages{{pipeline="mq",sink="mqtt"}} {MAX_IN_FLIGHT}.0'
            in metrics
        )

        os.kill(broker.pid(), signal.SIGCONT)
        frozen = False
        target = master_gtid()
        wait_for(lambda: _reached(daemon, target), 60, "the position once the broker is back")
        wanted = {coordinates(m) for m in daemon.messages()}
        assert len(wanted) == 50 * 2 + 17
        assert daemon.count("mqtt_backpressure") == 1  # one line for the whole freeze
        wait_for(lambda: subscriber.seen() >= wanted, 30, "a notice for every change")
        assert subscriber.seen() == wanted
        assert daemon.stop() == 0
    finally:
        if frozen:
            os.kill(broker.pid(), signal.SIGCONT)
        if subscriber is not None:
            subscriber.stop()
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.proc.kill()
        broker.down()
