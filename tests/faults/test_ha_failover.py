"""High availability under faults: two or three `replicad run` daemons on one pipeline, a
continuous random workload on MariaDB, and the leader repeatedly SIGKILLed, stopped past its
ZooKeeper session (SIGSTOP ... SIGCONT: a zombie), or cut off from ZooKeeper until its session
expires (a partition through a TCP proxy). Afterwards the Kafka topics are folded and compared
with the tables.

Oracles:
- nothing lost: the topics, folded per key in binlog order (a consumer dropping repeats by
  source coordinates, as the README tells at-least-once consumers to), equal the tables;
- duplicates only from the window each fault leaves: every repeated change lies after the
  position ZooKeeper held just before some fault and no later than the primary's binlog end
  right after that fault (what the deposed leader could have read);
- a zombie publishes nothing after its leadership is gone: from its own log, it paused
  publishing at its first look at the lease after waking, and the rows it had handed to its
  sinks did not grow between that pause and the abandonment of its pipeline;
- failover time (fault -> the new leader's first publish) is measured and reported, and held
  to the target: session timeout + 2 s for faults that end the session at once (SIGKILL is
  noticed only when the session times out, so it is session timeout + 2 s too).

Iterations: REPLICAD_HA_ITERATIONS (default 6 in CI) faults per test.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from kazoo.client import KazooClient

from tests.daemon_process import wait_for
from tests.integration.test_kafka_sink import (
    BackgroundWriter,
    KafkaReplicad,
    audit_messages,
    audit_rows,
    master_gtid,
    normalise_expected,
    read_topics,
    shop,  # noqa: F401  (fixture)
    tables_state,
)
from tests.integration.test_position_cli_local import master_status as binlog_end
from tests.kafka_helpers import Record, consume_all
from tests.tcp_proxy import FaultProxy

pytestmark = pytest.mark.faults

SESSION_TIMEOUT_S = 3.0
ITERATIONS = int(os.environ.get("REPLICAD_HA_ITERATIONS", "6"))


class HaReplicad(KafkaReplicad):
    """A worker of the pipeline: Kafka sink, ZooKeeper through its own fault proxy."""

    def __init__(self, tmp: Path, name: str, zk_port: int, root: str, **kwargs: Any) -> None:
        super().__init__(tmp / name, **kwargs)
        self.name = name
        self.zk_env = {
            "REPLICAD_COORDINATION__ZOOKEEPER__HOSTS": f"127.0.0.1:{zk_port}",
            "REPLICAD_COORDINATION__ZOOKEEPER__ROOT": root,
            "REPLICAD_COORDINATION__ZOOKEEPER__SESSION_TIMEOUT_S": str(SESSION_TIMEOUT_S),
            "REPLICAD_COORDINATION__ZOOKEEPER__WORKER_ID": name,
        }

    @property
    def env(self) -> dict[str, str]:
        return {**super().env, **self.zk_env}

    def start(self) -> None:  # a standby never connects to MariaDB: wait for its candidacy
        before = self.count("zk_candidate_created")
        super_start = super(KafkaReplicad, self)
        try:
            super_start.start()
        except AssertionError:
            pass  # not the leader: no source_connected
        assert self.proc is not None
        wait_for(
            lambda: self.count("zk_candidate_created") > before or self.proc.poll() is not None,
            20,
            f"{self.name} to become a candidate",
        )
        assert self.proc.poll() is None, self.err.read_text()[-3000:]


def zk_state(zookeeper: str, root: str, pipeline: str) -> dict[str, Any]:
    client = KazooClient(hosts=zookeeper)
    client.start(10)
    try:
        base = f"{root}/default/pipelines/{pipeline}"
        status = client.exists(f"{base}/status") and client.get(f"{base}/status")[0]
        position = client.exists(f"{base}/position") and client.get(f"{base}/position")[0]
        return {
            "status": orjson.loads(status) if status else None,
            "position": orjson.loads(position)["position"] if position else None,
        }
    finally:
        client.stop()


def coordinate(record: Record) -> tuple[str, int, int]:
    h = record.headers
    return h["replicad.file"].decode(), int(h["replicad.pos"]), int(h["replicad.row"])


def fold_in_binlog_order(records: list[Record], prefix: str, db: str) -> dict[str, Any]:
    """Per key, apply a message only if it is not older (by source coordinates) than the
    last one applied: the dedupe an at-least-once consumer does. A delete and its tombstone,
    or a repeat, share coordinates and apply idempotently."""
    out: dict[str, dict[str, Any]] = {}
    newest: dict[tuple[str, str], tuple[str, int, int]] = {}
    for record in records:
        table = record.topic[len(f"{prefix}.{db}.") :]
        if table == "audit":
            continue
        key = "" if record.key is None else record.key.decode()
        where = coordinate(record)
        if where < newest.get((table, key), ("", 0, -1)):
            continue  # an older copy arriving late (a deposed leader's in-flight message)
        newest[(table, key)] = where
        state = out.setdefault(table, {})
        envelope = None if record.value is None else orjson.loads(record.value)
        if envelope is None or envelope["op"] == "d":
            state.pop(key, None)
            continue
        after = dict(envelope["after"])
        if isinstance(after.get("flags"), str):
            after["flags"] = ",".join(sorted(filter(None, after["flags"].split(","))))
        state[key] = after
    return out


def leader_of(workers: list[HaReplicad], zookeeper: str, root: str, pipeline: str) -> HaReplicad:
    def current() -> HaReplicad | None:
        status = zk_state(zookeeper, root, pipeline)["status"]
        worker = status and status.get("worker")
        return next((w for w in workers if w.name == worker and w.proc.poll() is None), None)

    wait_for(lambda: current() is not None, 30, "a leader's status")
    found = current()
    assert found is not None
    return found


def first_publish_after(worker: HaReplicad, t: float) -> float | None:
    """Wall time of the worker's first `publishing` log line after t (its pipeline started
    and handed a row to Kafka), from the structured log."""
    for event in worker.log_events():
        if event.get("event") == "first_row_published" and _ts(event) > t:
            return _ts(event)
    return None


def wait_for_takeover(others: list[HaReplicad], started: float, fault: str) -> float:
    """The time another worker first published after `started`."""
    times: list[float] = []

    def published() -> bool:
        times[:] = [t for w in others if (t := first_publish_after(w, started)) is not None]
        return bool(times)

    wait_for(published, SESSION_TIMEOUT_S * 4 + 20, f"another worker to take over ({fault})")
    return min(times)


def wait_for_abandon(worker: HaReplicad, after: float, who: str) -> None:
    def abandoned() -> bool:
        return any(
            e.get("event") == "pipeline_abandoned" and _ts(e) > after for e in worker.log_events()
        )

    try:
        wait_for(abandoned, 30, f"{who} to abandon its pipeline")
    except AssertionError as exc:  # say what it did instead (failed? exited?)
        assert worker.proc is not None
        seen = [
            {k: e.get(k) for k in ("timestamp", "event", "error") if k in e}
            for e in worker.log_events()
            if _ts(e) > after and e.get("level") != "debug"
        ]
        raise AssertionError(f"{exc}; exit code {worker.proc.poll()}; log: {seen[-8:]}") from None


def _ts(event: dict[str, Any]) -> float:
    from datetime import datetime

    return datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()


@dataclass
class Zombie:
    worker: HaReplicad
    stopped: float  # wall time of SIGSTOP
    woke: float  # wall time just before SIGCONT


@dataclass
class FaultRun:
    """What `run_with_faults` did: the workers (all stopped), each fault's window
    (ZooKeeper's position before it, the binlog end right after it), failover times, the
    workers that were zombies (with when each was stopped and woken), and the statements
    written."""

    workers: list[HaReplicad]
    windows: list[tuple[tuple[str, int], tuple[str, int]]]
    failovers: list[tuple[str, float]]
    zombies: list[Zombie]
    statements: int


def run_with_faults(
    db: str,
    kafka: str,
    zookeeper: str,
    zk_root: str,
    tmp_path: Path,
    *,
    workers_n: int,
    pipeline: str,
    prefix: str,
    server_id: int,
    seed: int,
    iterations: int,
    **worker_options: Any,
) -> FaultRun:
    """`workers_n` workers of one pipeline and a continuous workload; `iterations` times the
    leader is SIGKILLed (and restarted as a standby), SIGSTOPped past its session (a zombie,
    then SIGCONTed) or partitioned from ZooKeeper (healed once it abandoned its pipeline),
    in that order. Returns after the last leader caught up with the primary and every worker
    stopped cleanly (exit 0)."""
    zk_host, zk_port = zookeeper.split(":")
    proxies = [FaultProxy(zk_host, int(zk_port)).__enter__() for _ in range(workers_n)]
    workers = [
        HaReplicad(
            tmp_path,
            f"w{i}",
            proxies[i].port,
            zk_root,
            server_id=server_id,
            prefix=prefix,
            kafka=kafka,
            pipeline=pipeline,
            **worker_options,
        )
        for i in range(workers_n)
    ]
    proxy_of = {w.name: p for w, p in zip(workers, proxies, strict=True)}
    writer = BackgroundWriter(db, seed=seed, pause_s=0.02)
    windows: list[tuple[tuple[str, int], tuple[str, int]]] = []
    failovers: list[tuple[str, float]] = []
    zombies: list[Zombie] = []
    try:
        for worker in workers:
            worker.start()
        writer.start()
        for i in range(iterations):
            leader = leader_of(workers, zookeeper, zk_root, pipeline)
            wait_for(lambda: zk_state(zookeeper, zk_root, pipeline)["position"], 30, "a position")
            time.sleep(1.0)  # let it publish for a while
            before = zk_state(zookeeper, zk_root, pipeline)["position"]
            fault = ("kill", "zombie", "partition")[i % 3]
            started = time.time()
            if fault == "kill":
                leader.stop(signal.SIGKILL)
            elif fault == "zombie":
                assert leader.proc is not None
                leader.proc.send_signal(signal.SIGSTOP)
            else:
                proxy_of[leader.name].partition()
            windows.append(((before["file"], before["pos"]), binlog_end()))
            others = [w for w in workers if w is not leader]
            took = wait_for_takeover(others, started, fault)
            failovers.append((fault, took - started))
            if fault == "kill":
                leader.start()  # back as a standby
            elif fault == "zombie":
                assert leader.proc is not None
                woke = time.time()
                leader.proc.send_signal(signal.SIGCONT)
                wait_for_abandon(leader, woke, "the zombie")
                zombies.append(Zombie(leader, started, woke))
            else:
                wait_for_abandon(leader, started, "the partitioned leader")
                proxy_of[leader.name].heal()
    finally:
        statements = writer.stop()
    leader_of(workers, zookeeper, zk_root, pipeline)
    target = master_gtid()
    wait_for(
        lambda: (
            (zk_state(zookeeper, zk_root, pipeline)["position"] or {}).get("mariadb_gtid") == target
        ),
        60,
        "the leader to catch up",
    )
    for worker in workers:
        assert worker.proc is not None
        if worker.proc.poll() is None:
            assert worker.stop() == 0, worker.err.read_text()[-3000:]
    for proxy in proxies:
        proxy.__exit__()
    return FaultRun(workers, windows, failovers, zombies, statements)


def change_id(record: Record) -> tuple[Any, ...]:
    """(topic, file, pos, row, op): one change. A primary-key change is a delete and a
    create at the same coordinates: op tells them apart (a tombstone's op is None)."""
    op = None if record.value is None else orjson.loads(record.value)["op"]
    return (record.topic, *coordinate(record), op)


@pytest.mark.parametrize("workers_n", [2, 3])
def test_failover_loses_nothing_and_zombies_stay_silent(
    shop,  # noqa: F811
    kafka: str,
    zookeeper: str,
    zk_root: str,
    tmp_path: Path,
    workers_n: int,
) -> None:
    conn, db = shop
    prefix = f"ha{uuid.uuid4().hex[:8]}"
    run = run_with_faults(
        db,
        kafka,
        zookeeper,
        zk_root,
        tmp_path,
        workers_n=workers_n,
        pipeline=f"ha{workers_n}",
        prefix=prefix,
        server_id=7400 + workers_n,
        seed=40 + workers_n,
        iterations=ITERATIONS,
    )
    windows, failovers = run.windows, run.failovers

    records = read_topics(kafka, prefix, db)
    assert fold_in_binlog_order(records, prefix, db) == normalise_expected(tables_state(conn, db))
    counts: dict[tuple[Any, ...], int] = {}
    for record in records:
        key = change_id(record)
        counts[key] = counts.get(key, 0) + 1
    dups = [k for k, n in counts.items() if n > 1]
    for dup in dups:
        where = (dup[1], dup[2])
        assert any(low < where <= high for low, high in windows), (dup, windows)
    for zombie in run.zombies:
        _assert_silent_after_loss(zombie)
    worst = max(t for _, t in failovers)
    print(
        f"{workers_n} workers, {ITERATIONS} faults, {run.statements} statements, "
        f"{len(records)} messages, {len(dups)} duplicated; failover s: "
        + ", ".join(f"{f} {t:.2f}" for f, t in failovers)
    )
    assert worst <= SESSION_TIMEOUT_S + 2.0, failovers


EOS_ITERATIONS = max(3, ITERATIONS // 2)


def test_exactly_once_failover_has_no_duplicates(
    shop,  # noqa: F811
    kafka: str,
    zookeeper: str,
    zk_root: str,
    tmp_path: Path,
) -> None:
    """Exactly-once (`sinks.kafka.exactly_once: true`) under the same faults, two workers:
    the committed Kafka transactions hold every change once, and they fold to the tables.

    What a real Kafka adds: a read_committed consumer never sees the records of an aborted
    Kafka transaction (the batch a SIGKILLed, stopped or partitioned leader had open, aborted
    when the new leader's init_transactions fences its producer or when it times out). tansu
    shows them (services.md), so here the oracle identifies them itself: every data message
    names its Kafka transaction (header `replicad.batch`) and every committed transaction
    produced a position record naming the same batch as its last record; a batch without a
    position record never committed and is dropped, as Kafka would hide it. A batch whose
    position record is visible although its commit did not finish (killed in between) is
    visible on tansu with that record, and the new leader, reading the record there, resumes
    after it: it is kept and must not be repeated either. The sink writes the position record
    only once the batch's data messages are acknowledged, so such a batch is whole.

    Oracles:
    - the kept messages, folded per key in binlog order (as the at-least-once test does),
      equal the tables, and the table without a primary key has one message per row; every
      data message carries a batch id;
    - among the kept messages no change (topic, file, pos, row, op) appears twice;
    - each zombie paused publishing at its first look at the lease after waking and had
      handed no more rows to its sink when it abandoned its pipeline;
    - no worker logged a committed Kafka transaction after abandoning its pipeline, before it
      led again; and none that the next leader, fencing it, did not see: a commit logged after
      another worker's init_transactions is no later than the position that worker loaded.
    """
    conn, db = shop
    prefix = f"he{uuid.uuid4().hex[:8]}"
    pipeline = f"haeos{uuid.uuid4().hex[:6]}"
    run = run_with_faults(
        db,
        kafka,
        zookeeper,
        zk_root,
        tmp_path,
        workers_n=2,
        pipeline=pipeline,
        prefix=prefix,
        server_id=7410,
        seed=50,
        iterations=EOS_ITERATIONS,
        kafka_yaml="exactly_once: true\nproducer: {transaction.timeout.ms: 10000}",
        log_level="debug",
    )

    positions = [
        orjson.loads(r.value)
        for r in consume_all(kafka, [f"{prefix}.replicad-positions"], idle_s=5.0)
        if r.key == pipeline.encode() and r.value is not None
    ]
    committed = {p["batch"] for p in positions}
    records = read_topics(kafka, prefix, db)
    missing = [r for r in records if "replicad.batch" not in r.headers]
    assert not missing, missing[:3]
    kept = [r for r in records if r.headers["replicad.batch"].decode() in committed]
    aborted = {r.headers["replicad.batch"] for r in records} - {
        r.headers["replicad.batch"] for r in kept
    }
    folded = fold_in_binlog_order(kept, prefix, db)
    expected = normalise_expected(tables_state(conn, db))
    assert folded == expected, _fold_difference(folded, expected, records, committed, prefix, db)
    assert audit_messages(kept) == audit_rows(conn, db)  # the table without a primary key
    counts = Counter(change_id(r) for r in kept)
    dups = [k for k, n in counts.items() if n > 1]
    assert not dups, (len(dups), dups[:5])
    for zombie in run.zombies:
        _assert_silent_after_loss(zombie, fenced_ok=True)
        _assert_no_output_after_wake(zombie, records, positions)
    for worker in run.workers:
        _assert_no_commit_after_abandon(worker)
    _assert_successors_saw_every_commit(run.workers)
    instances = {b.split(":")[0] for b in committed}
    print(
        f"exactly-once, 2 workers, {EOS_ITERATIONS} faults, {run.statements} statements, "
        f"{len(records)} messages in {len(committed)} committed batches of {len(instances)} "
        f"sink instances; {len(records) - len(kept)} messages of {len(aborted)} batches "
        "without a position record dropped (aborted); 0 duplicated; failover s: "
        + ", ".join(f"{f} {t:.2f}" for f, t in run.failovers)
    )


def _fold_difference(
    folded: dict[str, Any],
    expected: dict[str, Any],
    records: list[Record],
    committed: set[str],
    prefix: str,
    db: str,
) -> str:
    """Which keys differ, and every message (kept or not) of the first few of them."""
    lines = []
    for table in sorted(set(folded) | set(expected)):
        got, want = folded.get(table, {}), expected.get(table, {})
        for key in sorted(set(got) | set(want)):
            if got.get(key) != want.get(key):
                lines.append(f"{table} {key}: folded {got.get(key)} != table {want.get(key)}")
                topic = f"{prefix}.{db}.{table}"
                for r in records:
                    if r.topic == topic and (r.key or b"").decode() == key:
                        batch = r.headers["replicad.batch"].decode()
                        lines.append(
                            f"    {coordinate(r)} batch {batch} "
                            f"{'kept' if batch in committed else 'DROPPED'} "
                            f"ts {r.timestamp} {r.value and orjson.loads(r.value).get('op')}"
                        )
    return "\n".join(lines[:80])


def _position_key(text: str) -> tuple[str, int, int]:
    """'mariadb-bin.000018:3120 gtid=0-1-35 row=5' (a logged position) -> (file, pos, row)."""
    where, *rest = text.split(" ")
    file, pos = where.rsplit(":", 1)
    row = next((int(p[4:]) for p in rest if p.startswith("row=")), 0)
    return file, int(pos), row


def _assert_successors_saw_every_commit(workers: list[HaReplicad]) -> None:
    """A deposed leader (e.g. a zombie whose commit was in flight when it was stopped) may
    still log a commit after the next leader fenced its producer (init_transactions,
    `kafka_transactions_ready`), but only of a batch that had committed before the fence:
    its position is no later than the one the next leader loaded from Kafka right after."""
    commits: list[tuple[float, str, float, tuple[str, int, int]]] = []
    fences: list[tuple[float, str, tuple[str, int, int] | None]] = []
    for worker in workers:
        leading = 0.0
        fenced_at: float | None = None
        for event in worker.log_events():
            name = event.get("event")
            if name == "leading":
                leading = _ts(event)
            elif name == "kafka_transactions_ready":
                fenced_at = _ts(event)
            elif name in ("kafka_position_loaded", "kafka_position_absent") and fenced_at:
                loaded = event.get("position")
                fences.append((fenced_at, worker.name, loaded and _position_key(loaded)))
                fenced_at = None
            elif name == "kafka_batch_committed":
                commits.append((_ts(event), worker.name, leading, _position_key(event["position"])))
    for at, name, leading, position in commits:
        for fence, other, loaded in fences:
            if other != name and leading < fence < at:
                assert loaded is not None and position <= loaded, (
                    f"{name} committed {position} after {other} fenced it and loaded {loaded}"
                )


def _assert_no_commit_after_abandon(worker: HaReplicad) -> None:
    """From the worker's log: between `pipeline_abandoned` and its next `leading` (or the
    end of the log) no Kafka transaction was committed."""
    abandoned: dict[str, Any] | None = None
    for event in worker.log_events():
        name = event.get("event")
        if name == "leading":
            abandoned = None
        elif name == "pipeline_abandoned":
            abandoned = event
        elif name == "kafka_batch_committed":
            assert abandoned is None, (worker.name, abandoned, event)


def _assert_silent_after_loss(zombie: Zombie, fenced_ok: bool = False) -> None:
    """In the zombie's own log, after it woke: it paused publishing (its lease had run out)
    before handing over any row, and the pipeline it abandoned had published no more rows
    than at that pause. With `fenced_ok` (exactly-once) its pipeline may instead have failed
    first, its Kafka producer fenced or its transaction aborted by the new leader
    (`pipeline_failed_without_lease`, no drain): the caller then checks its output itself."""
    events = [e for e in zombie.worker.log_events() if _ts(e) >= zombie.woke]
    names = [e.get("event") for e in events]
    assert "pipeline_abandoned" in names, "the zombie never abandoned its pipeline"
    end = names.index("pipeline_abandoned")
    if "publishing_paused" in names[:end]:
        pause = events[names.index("publishing_paused")]
        assert pause["rows"] == events[end]["rows"], (pause, events[end])
        return
    # Woken inside a batch commit, its producer finds itself fenced or its transaction in an
    # error state (aborted by the new leader's init_transactions): it fails, sending nothing.
    failed = [e for e in events[:end] if e.get("event") == "pipeline_failed_without_lease"]
    assert fenced_ok and failed, f"the zombie published without looking at its lease: {names}"
    assert "Kafka" in failed[0]["error"], failed[0]


def _assert_no_output_after_wake(
    zombie: Zombie, records: list[Record], positions: list[dict[str, Any]]
) -> None:
    """No message and no position record of the zombie's Kafka producer (its sink instance,
    named in each `replicad.batch`) was created after it woke (librdkafka stamps CreateTime
    at produce(); what it had queued before the stop keeps the earlier time)."""
    ready = [
        e
        for e in zombie.worker.log_events()
        if e.get("event") == "kafka_transactions_ready" and _ts(e) < zombie.stopped
    ]
    assert ready, "the zombie never initialised Kafka transactions"
    instance = ready[-1]["instance"]
    woke_ms = zombie.woke * 1000
    late = [
        (r.topic, r.offset, r.timestamp)
        for r in records
        if r.headers["replicad.batch"].decode().startswith(f"{instance}:")
        and r.timestamp is not None
        and r.timestamp >= woke_ms
    ]
    late_commits = [
        p for p in positions if p["batch"].startswith(f"{instance}:") and p["ts_ms"] >= woke_ms
    ]
    assert not late and not late_commits, (zombie.worker.name, instance, late[:5], late_commits)
