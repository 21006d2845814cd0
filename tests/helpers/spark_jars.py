"""The directory of the Spark jobs' jars (scripts/spark/pom.xml: Delta Lake, spark-sql-kafka;
s3/pom.xml: hadoop-aws) for tests: SPARK_JARS_DIR when it names one fetched already, else
fetched by `scripts/services.sh spark-jars` (a no-op once fetched)."""

from __future__ import annotations

import functools
import os
import subprocess

from tests.helpers.daemon_process import ROOT


@functools.cache
def spark_jars_dir() -> str:
    given = os.environ.get("SPARK_JARS_DIR")
    if given:
        return given
    fetched = subprocess.run(
        ["bash", str(ROOT / "scripts/services.sh"), "spark-jars"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert fetched.returncode == 0, fetched.stderr[-2000:]
    return fetched.stdout.strip().splitlines()[-1]
