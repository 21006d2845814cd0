"""One Kafka producer process of a pipeline with `sinks.kafka.producer_processes` > 1
(sinks/producer_pool.py): `python -m replicad.service.producer_process FORMAT LEVEL`, started
by the pipeline's process, never by hand.

It ignores SIGTERM and SIGINT: a service manager that signals the whole group (systemd's
default) or a Ctrl-C reaches the pipeline too, and the pipeline drains, then ends this
process's input, and this process flushes and exits. If the pipeline dies, the end of input
comes from the kernel."""

from __future__ import annotations

import os
import signal
import sys
from typing import TYPE_CHECKING

from replicad.service.logging import configure_logging
from replicad.sinks.producer_child import serve

if TYPE_CHECKING:  # not imported at run time: this process starts with every pipeline start
    from replicad.config import Config


def command(config: Config) -> list[str]:
    """How the pipeline starts one (logging as its own)."""
    return [sys.executable, "-m", __name__, config.log.format, config.log.level]


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    fmt, level = argv
    configure_logging(fmt, level)
    # Reports go on a private copy of standard output; a stray print cannot corrupt them.
    reports = os.dup(1)
    os.dup2(2, 1)
    serve(0, reports)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
