"""`sinks.mqtt` against a real mosquitto (Debian's, a private instance per test): a notice per
change with no gap through a broker restart, the stored position held while the broker is
away, wrong credentials refused with exit 78. The JSON-lines sink beside it is the oracle: it
writes every change, and the position waits for both sinks."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import paho.mqtt.client as paho
import pytest

from tests.helpers.daemon_process import ROOT, DaemonProcess, wait_for
from tests.helpers.kafka_run import gtid_reached, master_gtid
from tests.helpers.mariadb import MARIADB_PORT

pytestmark = pytest.mark.integration

SERVICES = ROOT / "scripts" / "services.sh"


class Mosquitto:
    def __init__(self, directory: Path, passwd: Path | None = None) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.dir = directory
        self.passwd = passwd

    def _run(self, action: str) -> None:
        extra = [str(self.passwd)] if self.passwd else []
        subprocess.run(["bash", str(SERVICES), "mosquitto-instance", action, str(self.dir),
                        str(self.port), *extra], check=True)  # fmt: skip

    def up(self) -> None:
        self._run("up")

    def down(self) -> None:
        self._run("down")


class Subscriber:
    """A persistent-session subscriber (QoS 1) that records every notice it receives."""

    def __init__(self, port: int, topic: str) -> None:
        self.notices: list[dict] = []
        self.lock = threading.Lock()
        self.client = paho.Client(
            paho.CallbackAPIVersion.VERSION2,
            client_id=f"sub-{uuid.uuid4().hex[:8]}",
            clean_session=False,
        )
        self.client.on_connect = lambda c, *_: c.subscribe(topic, qos=1)
        self.client.on_message = self._message
        self.client.reconnect_delay_set(0.1, 1)
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()

    def _message(self, client, userdata, message) -> None:
        with self.lock:
            self.notices.append(json.loads(message.payload))

    def seen(self) -> set[tuple]:
        with self.lock:
            return {_coordinates(n) for n in self.notices}

    def stop(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def _coordinates(message: dict) -> tuple:
    source = message["source"]
    return (message["op"], source["file"], source["pos"], source["row"])


def _daemon(tmp: Path, port: int, prefix: str, db: str, mqtt_extra: str = "") -> DaemonProcess:
    tmp.mkdir(parents=True, exist_ok=True)
    return DaemonProcess(
        tmp, pipeline="mq",
        source_yaml=(f"  host: 127.0.0.1\n  port: {MARIADB_PORT}\n  user: repl\n"
                     "  server_id: 7501\n  start: latest\n  heartbeat_s: 1\n"),
        password="repl",
        sinks_yaml=(f"  stdout: {{path: {tmp / 'changes.jsonl'}}}\n"
                    f"  mqtt: {{port: {port}, prefix: {prefix}, client_id: rd-{prefix}, "
                    f"reconnect_max_s: 0.5{mqtt_extra}}}"),
        extra_yaml=f"filters: {{include: ['{db}\\..*']}}\ncheckpoint: {{interval_s: 0.2}}\n",
    )  # fmt: skip


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

        def write(first: int, count: int) -> None:
            with conn.cursor() as cur:
                for i in range(first, first + count):
                    cur.execute("INSERT INTO m VALUES (%s, 0)", (i,))
                    cur.execute("UPDATE m SET v = v + 1 WHERE id = %s", (i,))
                    if i % 3 == 0:
                        cur.execute("DELETE FROM m WHERE id = %s", (i,))
                    conn.commit()

        write(0, 200)
        stopper = threading.Thread(target=lambda: (time.sleep(0.3), broker.down()))
        stopper.start()
        write(200, 200)  # the broker goes away in the middle of these
        stopper.join()

        # Away: changes go on; the position must not pass them.
        write(400, 50)
        target = master_gtid()
        time.sleep(3)
        assert not gtid_reached((daemon.position() or {}).get("mariadb_gtid"), target)
        broker.up()
        wait_for(lambda: gtid_reached((daemon.position() or {}).get("mariadb_gtid"), target), 60,
                 "the position to move once the broker is back")  # fmt: skip
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
    daemon = _daemon(tmp_path / "replicad", broker.port, "w", name,
                     ", username: replicad, password_env: TEST_MQTT_PW")  # fmt: skip
    broker.up()
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE w (id INT PRIMARY KEY)")
        conn.commit()
        proc = subprocess.Popen(
            [*daemon_command(daemon)], cwd=ROOT, env={**daemon.env, "TEST_MQTT_PW": "wrong"},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
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
