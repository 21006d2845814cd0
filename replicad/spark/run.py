"""Running a Spark job from the command line: the session, signals, exit codes and logs as
the daemon's (64 usage, 75 temporary, 78 configuration; docs/operations.md). `verify` exits 1
when it found a difference, 0 when every table it compared is equal."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from typing import Any

import structlog

from replicad.config import Config
from replicad.errors import ReplicadError
from replicad.exit_codes import EXIT_CHECK_FAILED, EXIT_OK, EXIT_TEMPFAIL
from replicad.published.exits import exit_code

log = structlog.get_logger("replicad.spark")

# The master URL forms Spark accepts (SparkContext.createTaskScheduler, SparkSubmit):
# local, local[N], local[*], local[N,F], local[*,F], local-cluster[N,C,M], spark://h:p[,h:p],
# yarn, k8s://..., mesos://... Checked before the JVM starts: a bad one cost a JVM start, a
# Java and a Python stack trace and a restart loop (issue 36).
_MASTER = re.compile(
    r"local(\[(\*|[1-9]\d*)(,[1-9]\d*)?\])?|local-cluster\[\d+,\d+,\d+\]|yarn"
    r"|spark://[^\s/]+(:\d+)?(,[^\s/]+(:\d+)?)*|(k8s|mesos)://\S+"
)


def master_problem(master: str) -> str | None:
    """Why `master` is not a Spark master URL (None: it has a form Spark accepts)."""
    if _MASTER.fullmatch(master):
        return None
    return (
        f"not a Spark master URL: {master!r} (local, local[N], local[*], local[N,F], "
        "spark://HOST:PORT, yarn, k8s://..., mesos://...)"
    )


def run_job(job: str, config: Config, *, master: str | None, once: bool) -> int:
    from replicad.spark import storage
    from replicad.spark.jobs import JOBS, Source
    from replicad.spark.session import build_session, lake_conf

    try:
        Source.of(config)  # a configuration the job cannot use fails before Spark starts
        conf = storage.with_s3(lake_conf(config.spark), config)
    except ReplicadError as exc:
        print(f"replicad spark {job}: {exc}", file=sys.stderr)
        return exit_code(exc)
    spark = build_session(
        master or config.spark.master, f"replicad-{job}-{config.pipeline}", conf=conf
    )
    spark.sparkContext.setLogLevel("ERROR")  # Spark's own chatter; replicad logs the job
    try:
        runner = JOBS[job](spark, config, once=once)

        def stop(signum: int, _frame: Any) -> None:
            log.info("stop_signal", signal=signal.Signals(signum).name)
            runner.stopping.set()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        log.info("spark_job_started", job=job, master=spark.sparkContext.master, once=once)
        runner.run()
        runner.stop()
        log.info("stopped", job=job)
        return EXIT_OK
    except ReplicadError as exc:
        log.error("spark_job_failed", job=job, error=str(exc))
        print(f"replicad spark {job}: {exc}", file=sys.stderr)
        return exit_code(exc)
    except Exception as exc:  # Spark's own errors: transient unless proven otherwise
        log.error("spark_job_failed", job=job, error=str(exc).splitlines()[0][:2000])
        print(f"replicad spark {job}: {exc}", file=sys.stderr)
        return EXIT_TEMPFAIL
    finally:
        spark.stop()


def run_verify(config: Config, *, master: str | None, as_json: bool) -> int:
    """`replicad spark verify`: every lake table `spark.tables` takes, compared with MySQL."""
    from replicad.spark.jobs import Source
    from replicad.spark.session import build_session, lake_conf
    from replicad.spark.verify import Verifier, jdbc_driver

    try:
        Source.of(config)
        password = config.source.resolve_password()
        driver = jdbc_driver(config, password)  # its jar must be there before Spark starts
        delta = lake_conf(config.spark)  # Delta's jars and extensions
    except ReplicadError as exc:
        print(f"replicad spark verify: {exc}", file=sys.stderr)
        return exit_code(exc)
    spark = build_session(
        master or config.spark.master,
        f"replicad-verify-{config.pipeline}",
        conf={
            **delta,
            "spark.jars": ",".join([delta["spark.jars"], str(driver.jar)]),
        },
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        verifier = Verifier(spark, config, password, driver)
        tables = verifier.tables()
        log.info(
            "spark_job_started", job="verify", master=spark.sparkContext.master, tables=len(tables)
        )
        reports = []
        for table in tables:
            report = verifier.verify(table, config.spark.verify_timeout_s)
            log.info("verify_table_checked", table=table, equal=report.equal, **report.counts)
            reports.append(report)
        print(json.dumps({"tables": [r.to_json() for r in reports]}, indent=None if as_json else 2))
        return EXIT_OK if all(r.equal for r in reports) else EXIT_CHECK_FAILED
    except ReplicadError as exc:
        log.error("spark_job_failed", job="verify", error=str(exc))
        print(f"replicad spark verify: {exc}", file=sys.stderr)
        return exit_code(exc)
    except Exception as exc:  # Spark's own errors (MySQL unreachable through JDBC, ...)
        log.error("spark_job_failed", job="verify", error=str(exc).splitlines()[0][:2000])
        print(f"replicad spark verify: {exc}", file=sys.stderr)
        return EXIT_TEMPFAIL
    finally:
        spark.stop()


def run_maintain(config: Config, *, master: str | None, retain_hours: float, optimize: bool) -> int:
    """`replicad spark maintain`: OPTIMIZE and VACUUM every Delta table of the lake; prints a
    JSON report per table."""
    from replicad.spark.maintenance import maintain, session_settings
    from replicad.spark.session import build_session, lake_conf

    try:
        conf = {**lake_conf(config.spark), **session_settings(retain_hours)}
    except ReplicadError as exc:
        print(f"replicad spark maintain: {exc}", file=sys.stderr)
        return exit_code(exc)
    # Delta's VACUUM prints on the JVM's standard output: the JVM starts with standard error
    # there, so that standard output carries only the report.
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        spark = build_session(
            master or config.spark.master, f"replicad-maintain-{config.pipeline}", conf=conf
        )
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    spark.sparkContext.setLogLevel("ERROR")
    try:
        reports = maintain(spark, config, retain_hours=retain_hours, optimize=optimize)
        print(json.dumps({"tables": reports}, indent=2))
        return EXIT_OK
    except ReplicadError as exc:
        print(f"replicad spark maintain: {exc}", file=sys.stderr)
        return exit_code(exc)
    except Exception as exc:  # Spark's and Delta's (a concurrent commit conflicted): run again
        log.error("spark_job_failed", job="maintain", error=str(exc).splitlines()[0][:2000])
        print(f"replicad spark maintain: {exc}", file=sys.stderr)
        return EXIT_TEMPFAIL
    finally:
        spark.stop()
