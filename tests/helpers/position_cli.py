"""The `replicad position` command against a daemon's config, and the primary's binlog end."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers.daemon_process import ROOT
from tests.helpers.mariadb import connect_root
from tests.helpers.mariadb_run import Replicad


def cli(replicad: Replicad, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "replicad.cli", *args, "-c", str(replicad.config)],
        cwd=ROOT,
        env=replicad.env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def master_status() -> tuple[str, int]:
    conn = connect_root()
    with conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        file, pos = cur.fetchone()[:2]
    conn.close()
    return str(file), int(pos)
