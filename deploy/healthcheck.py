"""Container health checks with nothing but the standard library (the slim image has no curl).
Installed in the image as /usr/local/lib/replicad/healthcheck.py; exit 0 healthy, 1 not.

    healthcheck.py                                  GET $HEALTHCHECK_URL, else
                                                    http://127.0.0.1:9108/healthz (the
                                                    image's HEALTHCHECK: metrics.listen)
    healthcheck.py --url http://127.0.0.1:9108/readyz
    healthcheck.py --tcp kafka:9092 --tcp redis:6379   each accepts a connection
    healthcheck.py --process org.apache.spark.deploy.SparkSubmit
                                                    a process whose command line holds it
    healthcheck.py --fresh-file /tmp/x --max-age 30   touched within the last 30 s

Several checks may be given; all must pass. The reason for a failure is printed (docker
inspect shows it under State.Health.Log).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

DEFAULT_URL = "http://127.0.0.1:9108/healthz"


def check_url(url: str, timeout: float) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            if 200 <= response.status < 300:
                return None
            return f"{url}: HTTP {response.status}"
    except urllib.error.HTTPError as exc:  # 4xx/5xx: the body says why (e.g. /readyz)
        body = exc.read(500).decode("utf-8", "replace").strip()
        return f"{url}: HTTP {exc.code} {body}"
    except (urllib.error.URLError, OSError) as exc:
        return f"{url}: {exc}"


def check_tcp(address: str, timeout: float) -> str | None:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return None
    except (OSError, ValueError) as exc:
        return f"{address}: {exc}"


def check_process(word: str) -> str | None:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if word in cmdline and entry.name != str(os.getpid()):
            return None
    return f"no process running {word!r}"


def check_fresh(path: str, max_age: float) -> str | None:
    try:
        age = time.time() - Path(path).stat().st_mtime
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    return None if age <= max_age else f"{path}: last touched {age:.0f} s ago"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="container health check")
    parser.add_argument("--url", action="append", default=[], help="GET must answer 2xx")
    parser.add_argument("--tcp", action="append", default=[], metavar="HOST:PORT")
    parser.add_argument("--process", action="append", default=[], metavar="WORD")
    parser.add_argument("--fresh-file", action="append", default=[], metavar="PATH")
    parser.add_argument("--max-age", type=float, default=30.0, help="for --fresh-file, seconds")
    parser.add_argument("--timeout", type=float, default=4.0, help="per check, seconds")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    urls = list(args.url)
    if not (urls or args.tcp or args.process or args.fresh_file):
        urls = [os.environ.get("HEALTHCHECK_URL", DEFAULT_URL)]
    problems = [check_url(url, args.timeout) for url in urls]
    problems += [check_tcp(address, args.timeout) for address in args.tcp]
    problems += [check_process(word) for word in args.process]
    problems += [check_fresh(path, args.max_age) for path in args.fresh_file]
    failed = [p for p in problems if p is not None]
    for problem in failed:
        print(f"unhealthy: {problem}")
    if not failed:
        print("healthy")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
