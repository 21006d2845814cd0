"""What the `sinks.mqtt` tests share: a private mosquitto (scripts/services.sh
mosquitto-instance; optionally with a password file or a TLS listener), a persistent-session
QoS 1 subscriber that records every notice, and `replicad run` with the JSON-lines sink (the
oracle: it writes every change, and the position waits for both sinks) beside MQTT."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import uuid
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho

from tests.helpers.daemon_process import ROOT, DaemonProcess
from tests.helpers.mariadb import MARIADB_PORT

SERVICES = ROOT / "scripts" / "services.sh"


class Mosquitto:
    def __init__(
        self,
        directory: Path,
        passwd: Path | None = None,
        *,
        port: int | None = None,
        tls: tuple[Path, Path] | None = None,
    ) -> None:
        """`tls`: the server's certificate and key (the listener then speaks TLS only)."""
        if port is None:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                port = sock.getsockname()[1]
        self.port = port
        self.dir = directory
        self.passwd = passwd
        self.tls = tls

    def _run(self, action: str) -> None:
        extra = [str(self.passwd) if self.passwd else ""]
        if self.tls is not None:
            extra += [str(self.tls[0]), str(self.tls[1])]
        subprocess.run(
            [
                "bash",
                str(SERVICES),
                "mosquitto-instance",
                action,
                str(self.dir),
                str(self.port),
                *extra,
            ],
            check=True,
        )

    def up(self) -> None:
        self._run("up")

    def down(self) -> None:
        self._run("down")

    def pid(self) -> int:
        return int((self.dir / "mosquitto.pid").read_text())


class Subscriber:
    """A persistent-session subscriber (QoS 1) that records every notice it receives (with
    `ca`: over TLS, verifying the broker against that CA)."""

    def __init__(self, port: int, topic: str, ca: Path | None = None) -> None:
        self.notices: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.client = paho.Client(
            paho.CallbackAPIVersion.VERSION2,
            client_id=f"sub-{uuid.uuid4().hex[:8]}",
            clean_session=False,
        )
        if ca is not None:
            self.client.tls_set(ca_certs=str(ca))
        self.client.on_connect = lambda c, *_: c.subscribe(topic, qos=1)
        self.client.on_message = self._message
        self.client.reconnect_delay_set(0.1, 1)
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()

    def _message(self, client: Any, userdata: Any, message: Any) -> None:
        with self.lock:
            self.notices.append(json.loads(message.payload))

    def seen(self) -> set[tuple[Any, ...]]:
        with self.lock:
            return {coordinates(n) for n in self.notices}

    def stop(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def coordinates(message: dict[str, Any]) -> tuple[Any, ...]:
    """A change's identity in a notice, a JSON-lines message or a Kafka envelope."""
    source = message["source"]
    return (message["op"], source["file"], source["pos"], source["row"])


def mqtt_daemon(
    tmp: Path,
    port: int,
    prefix: str,
    db: str,
    mqtt_extra: str = "",
    *,
    server_id: int = 7501,
    sinks_extra: str = "",
    extra_yaml: str = "",
) -> DaemonProcess:
    """`replicad run` from the latest position with the JSON-lines sink and MQTT on `port`
    (`mqtt_extra`: more keys of sinks.mqtt, each starting with ", "; `sinks_extra`: more
    sinks, lines indented by two spaces)."""
    tmp.mkdir(parents=True, exist_ok=True)
    return DaemonProcess(
        tmp,
        pipeline="mq",
        source_yaml=(
            f"  host: 127.0.0.1\n  port: {MARIADB_PORT}\n  user: repl\n"
            f"  server_id: {server_id}\n  start: latest\n  heartbeat_s: 1\n"
        ),
        password="repl",
        sinks_yaml=(
            f"  stdout: {{path: {tmp / 'changes.jsonl'}}}\n"
            f"  mqtt: {{port: {port}, prefix: {prefix}, client_id: rd-{prefix}, "
            f"reconnect_max_s: 0.5{mqtt_extra}}}" + sinks_extra
        ),
        extra_yaml=f"filters: {{include: ['{db}\\..*']}}\ncheckpoint: {{interval_s: 0.2}}\n"
        + extra_yaml,
    )


def write_rows(conn: Any, first: int, count: int) -> None:
    """Into table `m (id, v)`, per row: an insert, an update, every third a delete; one
    transaction each (3 changes per row, 2 for the others: 117 for 50 rows from 0)."""
    with conn.cursor() as cur:
        for i in range(first, first + count):
            cur.execute("INSERT INTO m VALUES (%s, 0)", (i,))
            cur.execute("UPDATE m SET v = v + 1 WHERE id = %s", (i,))
            if i % 3 == 0:
                cur.execute("DELETE FROM m WHERE id = %s", (i,))
            conn.commit()
