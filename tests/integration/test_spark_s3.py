"""Lake tables and the streaming checkpoints on S3 (`s3a://` paths, Hadoop's S3A from
scripts/spark/s3/pom.xml) against moto's S3 server on 127.0.0.1 (`scripts/services.sh up
s3`): `replicad spark materialize --once` twice, the second from the first's checkpoint on
S3, and each time the Delta table on S3, read by delta-rs without Spark or replicad, equals
SELECT. Nothing is written to local disk under the lake or checkpoint names.
"""

from __future__ import annotations

import urllib.request
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

import orjson
import pytest

from tests.helpers.kafka_run import wait_caught_up
from tests.integration.test_spark_open_lake import (
    _acc_pipeline,
    _delta_rows,
    _insert,
    _materialize_once,
    _selected,
)

pytestmark = [pytest.mark.integration, pytest.mark.serial]

KEYS = {"AWS_ACCESS_KEY_ID": "replicad", "AWS_SECRET_ACCESS_KEY": "replicad-secret"}


def _bucket(endpoint: str) -> str:
    name = f"lake-{uuid.uuid4().hex[:12]}"
    request = urllib.request.Request(f"{endpoint}/{name}", method="PUT")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
    return name


def _keys(endpoint: str, bucket: str, prefix: str) -> list[str]:
    """Object keys under `prefix` (one page: the test writes far fewer than 1000)."""
    url = f"{endpoint}/{bucket}?list-type=2&prefix={prefix}"
    with urllib.request.urlopen(url, timeout=10) as response:
        tree = ET.fromstring(response.read())
    return [e.text or "" for e in tree.iter() if e.tag.endswith("}Key")]


def test_lake_and_checkpoints_on_s3(db, kafka, s3, tmp_path: Path, monkeypatch) -> None:
    for key, value in KEYS.items():
        monkeypatch.setenv(key, value)  # the AWS chain S3A reads, inherited by the job
    bucket = _bucket(s3)
    conn, name = db
    replicad, path = _acc_pipeline(
        conn,
        name,
        kafka,
        tmp_path,
        7396,
        lake=f"s3a://{bucket}/lake",
        checkpoints=f"s3a://{bucket}/checkpoints",
        spark_yaml=f", s3: {{endpoint: '{s3}', path_style_access: true}}",
    )
    delta_rs = {
        "AWS_ENDPOINT_URL": s3,
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "us-east-1",
        "AWS_S3_ALLOW_UNSAFE_RENAME": "true",
        **KEYS,
    }
    log = tmp_path / "spark.log"
    try:
        with conn.cursor() as cur:
            _insert(cur, range(1, 201), "s")
            conn.commit()
            cur.execute("UPDATE acc SET v = v + 1, note = NULL WHERE id % 3 = 0")
            cur.execute("DELETE FROM acc WHERE id % 7 = 0")
            cur.execute("UPDATE acc SET id = id + 1000 WHERE id BETWEEN 50 AND 59")  # key change
        conn.commit()
        wait_caught_up(replicad)
        _materialize_once(replicad.config, log)
        assert _delta_rows(path, delta_rs) == _selected(conn, name)

        with conn.cursor() as cur:  # the second run starts from the checkpoint on S3
            cur.execute("DELETE FROM acc WHERE id % 5 = 0")
            cur.execute("UPDATE acc SET amt = amt * 2 WHERE id <= 20")
            _insert(cur, range(300, 310), "t")
        conn.commit()
        wait_caught_up(replicad)
        _materialize_once(replicad.config, log)
        assert _delta_rows(path, delta_rs) == _selected(conn, name)
    finally:
        assert replicad.stop() == 0
    checkpoint_keys = _keys(s3, bucket, "checkpoints/")
    assert any("/offsets/1" in k for k in checkpoint_keys), checkpoint_keys[:20]
    assert any(k.startswith(f"lake/{name}/acc/_delta_log/") for k in _keys(s3, bucket, "lake/"))
    applied = [
        orjson.loads(line)
        for line in log.read_text(errors="replace").splitlines()
        if '"lake_batch_applied"' in line
    ]
    # The consistent cut's bookkeeping reads the offset log through S3A as well.
    assert any(entry.get("through") for entry in applied), applied
    assert not any(p.exists() for p in (Path("s3a:"), tmp_path / "s3a:")), "written locally"
