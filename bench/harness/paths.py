"""Where the repository, its service script and the benchmarks' data live."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH_DIR = ROOT / "bench"  # the entry scripts; their --child runs a measured child
SERVICES_SCRIPT = ROOT / "scripts" / "services.sh"
SERVICES_DIR = ROOT / ".services"
DATA_DIR = BENCH_DIR / "data"  # gitignored
