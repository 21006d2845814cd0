"""Log lines stay whole when threads log at once: structlog's events and the standard
`logging` records of libraries (kazoo logs from its connection thread) share one writer.
Runs the logger in a child process so that stderr is a real file, as under systemd."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import logging, threading, structlog
from replicad.service.logging import configure_logging
configure_logging("json", "info")
def library(n):
    for i in range(400):
        logging.getLogger("kazoo.client").warning("Connection dropped: %s %d", "x" * 300, i)
def ours(n):
    log = structlog.get_logger()
    for i in range(400):
        log.warning("zk_suspended", thread=n, i=i, pad="y" * 300)
threads = [threading.Thread(target=f, args=(n,)) for n in range(3) for f in (library, ours)]
for t in threads: t.start()
for t in threads: t.join()
logging.getLogger("kazoo.client").info("below the libraries' level: not written")
"""


def test_concurrent_library_and_structlog_lines_stay_whole(tmp_path: Path) -> None:
    err = tmp_path / "stderr.log"
    with err.open("w") as f:
        subprocess.run([sys.executable, "-c", CHILD], stderr=f, check=True, timeout=60)
    lines = err.read_text().splitlines()
    records = [json.loads(line) for line in lines]  # raises on a torn or merged line
    library = [r for r in records if r.get("logger") == "kazoo.client"]
    assert len(library) == 1200 and len(records) == 2400, (len(library), len(records))
    assert all(
        r["level"] == "warning" and r["event"].startswith("Connection dropped") for r in library
    )
