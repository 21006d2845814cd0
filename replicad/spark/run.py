"""Running a Spark job from the command line: the session, signals, exit codes and logs as
the daemon's (64 usage, 75 temporary, 78 configuration; docs/operations.md)."""

from __future__ import annotations

import signal
import sys
from typing import Any

import structlog

from replicad.config import Config
from replicad.errors import ReplicadError
from replicad.exit_codes import EXIT_OK, EXIT_TEMPFAIL
from replicad.service.exits import exit_code

log = structlog.get_logger("replicad.spark")


def run_job(job: str, config: Config, *, master: str | None, once: bool) -> int:
    from replicad.spark.jobs import JOBS, Source
    from replicad.spark.session import build_session

    try:
        Source.of(config)  # a configuration the job cannot use fails before Spark starts
    except ReplicadError as exc:
        print(f"replicad spark {job}: {exc}", file=sys.stderr)
        return exit_code(exc)
    spark = build_session(master or config.spark.master, f"replicad-{job}-{config.pipeline}")
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
