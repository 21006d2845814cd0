"""MQTT notices (docs/mqtt.md): one message per change on a topic per table, QoS 1, through
aiomqtt (the maintained successor of asyncio-mqtt, which fails with paho-mqtt 2).

A notice is queued by `publish` and sent by one task that owns the connection; a mark counts
as delivered once the broker acknowledged (PUBACK, or PUBCOMP at QoS 2) every notice before it,
so the stored position never passes a notice the broker has not taken. The connection has a
persistent session (a fixed client id, clean_session off). When it drops, every notice not
yet acknowledged is sent again after the reconnect (with backoff): a subscriber may see a
notice twice after a reconnect, never a gap. At most `max_in_flight` notices wait for their
acknowledgement; beyond that the pipeline waits (back-pressure).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import orjson
import structlog

from replicad.binlog.changes import RowChange, TableChange
from replicad.checkpoint_record import Checkpoint
from replicad.config import MqttSinkConfig
from replicad.errors import certificate_refused
from replicad.extras import missing_extra
from replicad.sinks.base import DeliveryTracker, DeliveryUnit, SinkError
from replicad.sinks.envelope import EnvelopeWriter, row_messages
from replicad.sinks.routing import ChangeFilter
from replicad.sinks.value_modes import ValueMode

try:  # the `mqtt` extra
    import aiomqtt
except ImportError:
    raise missing_extra("mqtt", "sinks.mqtt", "sinks.mqtt") from None

log = structlog.get_logger("replicad.sinks.mqtt")
_REFUSED_CREDENTIALS = {4, 5, 134, 135}  # MQTT 3.1.1 and 5 CONNACK codes: bad login, not authorised


@dataclass(slots=True)
class Notice:
    topic: str
    payload: bytes
    unit: DeliveryUnit


class MqttSink:
    def __init__(
        self,
        config: MqttSinkConfig,
        pipeline: str,
        change_filter: ChangeFilter | None = None,
        values: ValueMode | None = None,
    ) -> None:
        self.config = config
        self.pipeline = pipeline
        self.filter = change_filter
        self.values = values or ValueMode()
        self.prefix = config.prefix if config.prefix is not None else pipeline
        self.client_id = config.client_id or f"replicad-{pipeline}"
        self.password = config.resolve_password() or None
        self.writer = EnvelopeWriter(pipeline, self.values.connect)
        self.tracker = DeliveryTracker()
        self._queue: deque[Notice] = deque()  # not sent on the current connection yet
        self._unacked: dict[int, Notice] = {}  # sent, waiting for the broker; by send order
        self._sequence = 0
        self._topics: dict[tuple[str, str], str] = {}
        self._task: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._room: asyncio.Event | None = None
        self._broken: Exception | None = None  # a publish the connection did not take
        self.sent = 0
        self.reconnects = 0

    # ------------------------------------------------------------------ the Sink protocol

    def publish(self, change: RowChange) -> None:
        change = self.values.convert(change)
        topic = self._topic(change.db, change.table)
        for op, before, after in row_messages(change):
            if self.config.envelope:
                before_f, after_f = self._filtered(change)
                now_ms = int(time.time() * 1000)
                payload = self.writer.value(
                    change,
                    op,
                    None if before is None else before_f,
                    None if after is None else after_f,
                    now_ms,
                )
            else:
                row = before if op == "d" else after
                if self.filter is not None:
                    row = self.filter.key_row(change, row)
                key = (
                    {k: (row or {}).get(k) for k in change.primary_key}
                    if change.primary_key
                    else None
                )
                payload = orjson.dumps(
                    {
                        "op": op,
                        "db": change.db,
                        "table": change.table,
                        "key": key,
                        "source": {
                            "file": change.file,
                            "pos": change.pos,
                            "row": change.row,
                            "gtid": change.gtid,
                            "ts_ms": change.ts_ms,
                        },
                    }
                )
            self._enqueue(topic, payload)

    async def publish_table(self, change: TableChange) -> None:
        """A TRUNCATE is a notice with op "t" and no key; other schema changes are not sent
        (they are in Kafka's schema topic)."""
        if change.kind != "truncate":
            return
        if self.config.envelope:  # the value Kafka gets for it, as for the rows
            payload = self.writer.truncate(change, int(time.time() * 1000))
        else:
            payload = orjson.dumps(
                {
                    "op": "t",
                    "db": change.db,
                    "table": change.table,
                    "key": None,
                    "source": {
                        "file": change.file,
                        "pos": change.pos,
                        "row": 0,
                        "gtid": change.gtid,
                        "ts_ms": change.ts_ms,
                    },
                }
            )
        self._enqueue(self._topic(change.db, change.table), payload)

    def mark(self, seq: int, checkpoint: Checkpoint, transaction_end: bool) -> None:
        self.tracker.close(seq, checkpoint.position)

    def acked(self) -> int:
        return self.tracker.acked()

    @property
    def queued(self) -> int:
        """Notices not yet acknowledged by the broker (waiting to go, or sent without PUBACK);
        read by the metrics thread."""
        return len(self._queue) + len(self._unacked)

    @property
    def backlogged(self) -> bool:
        return len(self._queue) + len(self._unacked) >= self.config.max_in_flight

    async def wait_for_room(self) -> None:
        started = time.monotonic()
        logged = False
        while self.backlogged:
            self.tracker.acked()  # a failure raises here
            room = self._events()[1]
            room.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(room.wait(), 1.0)
            if self.backlogged and not logged and time.monotonic() - started >= 1.0:
                # A broker that takes notices but stops acknowledging them (overloaded,
                # frozen) shows here: the pipeline has stopped reading. Short waits are the
                # normal pace of a small max_in_flight and are not logged.
                logged = True
                log.warning(
                    "mqtt_backpressure",
                    host=self.config.host,
                    port=self.config.port,
                    unacknowledged=len(self._unacked),
                    queued=len(self._queue),
                    max_in_flight=self.config.max_in_flight,
                )

    async def maintain(self) -> None:
        self._start()
        self.tracker.acked()

    async def drain(self, timeout_s: float, failed: bool = False) -> None:
        if failed:
            return
        self._start()
        deadline = time.monotonic() + timeout_s
        while self.tracker.outstanding and time.monotonic() < deadline:
            if self.tracker.failure is not None:
                return
            await asyncio.sleep(0.02)

    def abandon(self) -> None:
        self._queue.clear()
        self._unacked.clear()
        self.close()

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    # ------------------------------------------------------------------ queueing

    def _topic(self, db: str, table: str) -> str:
        topic = self._topics.get((db, table))
        if topic is None:
            topic = self.config.topic.format(
                prefix=self.prefix, db=db, table=table, pipeline=self.pipeline
            )
            self._topics[(db, table)] = topic
        return topic

    def _filtered(self, change: RowChange) -> tuple[Any, Any]:
        if self.filter is None:
            return change.before, change.after
        return self.filter.rows(change)

    def _enqueue(self, topic: str, payload: bytes) -> None:
        unit = self.tracker.current
        unit.outstanding += 1
        self._queue.append(Notice(topic, payload, unit))
        self._start()
        self._events()[0].set()

    def _events(self) -> tuple[asyncio.Event, asyncio.Event]:
        if self._wake is None or self._room is None:
            self._wake, self._room = asyncio.Event(), asyncio.Event()
        return self._wake, self._room

    def _start(self) -> None:
        if self._task is None or self._task.done():
            if self._task is not None and self._task.done() and not self._task.cancelled():
                error = self._task.exception()
                if error is not None and self.tracker.failure is None:
                    self.tracker.failure = SinkError(f"the MQTT sink stopped: {error}")
                    return
            self._task = asyncio.get_running_loop().create_task(self._connection())

    # ------------------------------------------------------------------ the connection

    def _client(self) -> aiomqtt.Client:
        tls = None
        if self.config.tls:
            tls = aiomqtt.TLSParameters(
                ca_certs=str(self.config.tls_ca) if self.config.tls_ca else None,
                certfile=str(self.config.tls_cert) if self.config.tls_cert else None,
                keyfile=str(self.config.tls_key) if self.config.tls_key else None,
            )
        return aiomqtt.Client(
            self.config.host,
            self.config.port,
            identifier=self.client_id,
            clean_session=False,  # a persistent session: the broker keeps it across drops
            username=self.config.username,
            password=self.password,
            keepalive=self.config.keepalive_s,
            tls_params=tls,
            max_inflight_messages=self.config.max_in_flight,
            max_queued_outgoing_messages=0,  # unbounded inside paho: we bound it ourselves
            timeout=10.0,
        )

    async def _connection(self) -> None:
        delay = self.config.reconnect_initial_s
        while True:
            try:
                async with self._client() as client:
                    if self.reconnects:
                        log.info(
                            "mqtt_reconnected", host=self.config.host, resent=len(self._unacked)
                        )
                    delay = self.config.reconnect_initial_s
                    await self._session(client)
            except aiomqtt.MqttCodeError as exc:
                if getattr(exc.rc, "value", exc.rc) in _REFUSED_CREDENTIALS:
                    self.tracker.failure = _refused(self.config, exc)
                    self._events()[1].set()
                    return
                await self._backoff(exc, delay)
            except aiomqtt.MqttError as exc:
                if certificate_refused(exc):
                    # A broker certificate our CA did not sign stays so: exit 78 at once
                    # rather than reconnecting for ever.
                    self.tracker.failure = SinkError(
                        f"the MQTT broker's TLS certificate was refused: {exc}",
                        host=self.config.host,
                        port=self.config.port,
                        tls_ca=self.config.tls_ca,
                        key="sinks.mqtt",
                    )
                    self._events()[1].set()
                    return
                await self._backoff(exc, delay)
            delay = min(delay * 2, self.config.reconnect_max_s)

    async def _backoff(self, exc: Exception, delay: float) -> None:
        self.reconnects += 1
        # Every notice the broker did not acknowledge goes again, in its order.
        pending = [self._unacked[k] for k in sorted(self._unacked)]
        self._unacked.clear()
        self._queue.extendleft(reversed(pending))
        log.warning(
            "mqtt_unavailable",
            host=self.config.host,
            port=self.config.port,
            error=str(exc),
            retry_s=delay,
            unacknowledged=len(pending),
        )
        await asyncio.sleep(delay)

    async def _session(self, client: aiomqtt.Client) -> None:
        """Sends until the connection drops (raises MqttError)."""
        wake, _ = self._events()
        watcher = asyncio.create_task(_watch(client))
        senders: set[asyncio.Task[None]] = set()
        try:
            while True:
                while self._queue:
                    notice = self._queue.popleft()
                    self._sequence += 1
                    self._unacked[self._sequence] = notice
                    task = asyncio.create_task(self._send(client, self._sequence, notice))
                    senders.add(task)
                    task.add_done_callback(senders.discard)
                wake.clear()
                waiter = asyncio.create_task(wake.wait())
                done, _ = await asyncio.wait({watcher, waiter}, return_when=asyncio.FIRST_COMPLETED)
                waiter.cancel()
                if watcher in done:
                    watcher.result()  # raises the disconnect
                    raise aiomqtt.MqttError("the connection ended")
                if self._broken is not None:
                    broken, self._broken = self._broken, None
                    raise aiomqtt.MqttError(f"a notice was not taken: {broken}")
        finally:
            watcher.cancel()
            for task in list(senders):
                task.cancel()
            await asyncio.gather(watcher, *senders, return_exceptions=True)

    async def _send(self, client: aiomqtt.Client, sequence: int, notice: Notice) -> None:
        try:
            await client.publish(
                notice.topic, notice.payload, qos=self.config.qos, timeout=math.inf
            )
        except aiomqtt.MqttError as exc:
            # Not taken: reconnect, and it goes again with every other unacknowledged one.
            self._broken = exc
            self._events()[0].set()
            return
        if self._unacked.pop(sequence, None) is not None:
            notice.unit.delivered(None, None)
            self.sent += 1
            if not self.backlogged:
                self._events()[1].set()


async def _watch(client: aiomqtt.Client) -> None:
    """Ends (raising MqttError) when the connection drops: aiomqtt's message iterator is its
    public signal of a disconnect. Nothing is subscribed, so no message comes."""
    async for _ in client.messages:
        pass


def _refused(config: MqttSinkConfig, exc: Exception) -> SinkError:
    """Wrong credentials or not authorised: exit 78, an operator must act."""
    return SinkError(
        f"the MQTT broker refused the connection: {exc}",
        host=config.host,
        port=config.port,
        username=config.username,
        key="sinks.mqtt",
    )
