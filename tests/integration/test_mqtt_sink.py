"""`sinks.mqtt` against a real mosquitto (Debian's, a private instance per test): a notice per
change with no gap through a broker restart, the stored position held while the broker is
away, wrong credentials refused with exit 78. The JSON-lines sink beside it is the oracle: it
writes every change, and the position waits for both sinks."""

from __future__ import annotations

import subprocess
import threading
import time
import uuid

import pytest

from tests.helpers.daemon_process import ROOT, DaemonProcess, wait_for
from tests.helpers.kafka_run import gtid_reached, master_gtid
from tests.helpers.mqtt import Mosquitto, Subscriber, write_rows
from tests.helpers.mqtt import coordinates as _coordinates
from tests.helpers.mqtt import mqtt_daemon as _daemon

pytestmark = pytest.mark.integration


def test_every_change_has_a_notice_through_a_broker_restart_and_the_position_waits(
    db, tmp_path
) -> None:
    conn, name = db
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE m (id INT PRIMARY KEY, v INT)")
    conn.commit()
    broker = Mosquitto(tmp_path / "mosquitto")
    prefix = f"p{uuid.uuid4().hex[:6]}"
    daemon = _daemon(tmp_path / "replicad", broker.port, prefix, name)
    broker.up()
    subscriber: Subscriber | None = None
    try:
        subscriber = Subscriber(broker.port, f"{prefix}/#")
        daemon.start()

        write_rows(conn, 0, 200)
        stopper = threading.Thread(target=lambda: (time.sleep(0.3), broker.down()))
        stopper.start()
        write_rows(conn, 200, 200)  # the broker goes away in the middle of these
        stopper.join()

        # Away: changes go on; the position must not pass them.
        write_rows(conn, 400, 50)
        target = master_gtid()
        time.sleep(3)
        assert not gtid_reached((daemon.position() or {}).get("mariadb_gtid"), target)
        broker.up()
        wait_for(
            lambda: gtid_reached((daemon.position() or {}).get("mariadb_gtid"), target),
            60,
            "the position to move once the broker is back",
        )
        wanted = {_coordinates(m) for m in daemon.messages()}
        assert len(wanted) == 450 * 2 + 150  # inserts, updates, deletes
        wait_for(lambda: subscriber.seen() >= wanted, 60, "a notice for every change")
        assert subscriber.seen() == wanted  # and nothing else
        log = daemon.err.read_text()
        assert '"mqtt_unavailable"' in log and '"mqtt_reconnected"' in log
        assert daemon.stop() == 0
    finally:
        if subscriber is not None:
            subscriber.stop()
        if daemon.proc is not None and daemon.proc.poll() is None:
            daemon.proc.kill()
        broker.down()


def test_wrong_mqtt_credentials_exit_78_naming_the_sink(db, tmp_path) -> None:
    conn, name = db
    passwd = tmp_path / "passwd"
    passwd.touch()
    subprocess.run(["mosquitto_passwd", "-b", str(passwd), "replicad", "right"], check=True)
    broker = Mosquitto(tmp_path / "mosquitto", passwd)
    daemon = _daemon(
        tmp_path / "replicad",
        broker.port,
        "w",
        name,
        ", username: replicad, password_env: TEST_MQTT_PW",
    )
    broker.up()
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE w (id INT PRIMARY KEY)")
        conn.commit()
        proc = subprocess.Popen(
            [*daemon_command(daemon)],
            cwd=ROOT,
            env={**daemon.env, "TEST_MQTT_PW": "wrong"},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        time.sleep(2)
        with conn.cursor() as cur:
            cur.execute("INSERT INTO w VALUES (1)")
        conn.commit()
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 78, err.decode()[-2000:]
        assert b"sinks.mqtt" in err and b"refused" in err
    finally:
        broker.down()


def daemon_command(daemon: DaemonProcess) -> list[str]:
    import sys

    return [sys.executable, "-m", "replicad.cli", "run", "-c", str(daemon.config)]
