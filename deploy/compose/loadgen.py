"""A small, steady write load on the demo schema (deploy/compose/mysql/01-schema.sql), so the
compose pipeline always has changes to publish: new customers and orders, order status
updates, tier changes, and now and then a delete.

Runs in the replicad image (PyMySQL is one of replicad's dependencies):

    python loadgen.py --host mysql --database shop --rate 20

Credentials from MYSQL_USER / MYSQL_PASSWORD (deploy/compose/env/mysql.env). Touches
--alive-file after every transaction, which the compose healthcheck watches. Stops on
SIGTERM/SIGINT after the transaction in flight.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pymysql

STATUSES = ("new", "paid", "shipped", "cancelled")
TIERS = ("basic", "silver", "gold")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="write a steady load to the demo schema")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=3306)
    parser.add_argument("--database", default="shop")
    parser.add_argument("--rate", type=float, default=20.0, help="transactions per second")
    parser.add_argument("--count", type=int, default=0, help="stop after N (0: run forever)")
    parser.add_argument("--alive-file", default="/tmp/loadgen.alive")
    parser.add_argument("--seed", type=int, default=None)
    return parser


def connect(args: argparse.Namespace) -> pymysql.connections.Connection:
    """Connect, retrying while the server is still starting."""
    deadline = time.monotonic() + 120
    while True:
        try:
            return pymysql.connect(
                host=args.host,
                port=args.port,
                user=os.environ.get("MYSQL_USER", "shop"),
                password=os.environ.get("MYSQL_PASSWORD", ""),
                database=args.database,
                autocommit=False,
                charset="utf8mb4",
            )
        except pymysql.err.OperationalError as exc:
            if time.monotonic() > deadline:
                raise
            print(f"loadgen: waiting for {args.host}:{args.port} ({exc})", file=sys.stderr)
            time.sleep(2)


def one_transaction(cur: Any, rng: random.Random, serial: int) -> str:
    """One small transaction; what it did, for the log."""
    roll = rng.random()
    if roll < 0.15:
        email = f"user{serial}-{rng.randrange(1 << 30):x}@example.com"
        cur.execute(
            "INSERT INTO customers (email, name, tier) VALUES (%s, %s, %s)",
            (email, f"User {serial}", rng.choice(TIERS)),
        )
        return "customer+"
    cur.execute("SELECT id FROM customers ORDER BY RAND() LIMIT 1")
    row = cur.fetchone()
    if row is None:
        cur.execute(
            "INSERT INTO customers (email, name) VALUES (%s, %s)",
            (f"first{serial}@example.com", "First"),
        )
        return "customer+"
    customer = row[0]
    if roll < 0.55:
        cur.execute(
            "INSERT INTO orders (customer_id, total, note) VALUES (%s, %s, %s)",
            (customer, f"{rng.uniform(1, 500):.2f}", '{"source": "loadgen"}'),
        )
        return "order+"
    if roll < 0.85:
        cur.execute(
            "UPDATE orders SET status = %s WHERE customer_id = %s ORDER BY id DESC LIMIT 1",
            (rng.choice(STATUSES), customer),
        )
        return "order~"
    if roll < 0.97:
        cur.execute("UPDATE customers SET tier = %s WHERE id = %s", (rng.choice(TIERS), customer))
        return "customer~"
    cur.execute("DELETE FROM orders WHERE status = 'cancelled' ORDER BY id LIMIT 5")
    return "order-"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    rng = random.Random(args.seed)
    alive = Path(args.alive_file)
    conn = connect(args)
    interval = 1.0 / args.rate if args.rate > 0 else 0.0
    done: dict[str, int] = {}
    serial = 0
    next_at = time.monotonic()
    while not stop and (args.count == 0 or serial < args.count):
        serial += 1
        try:
            with conn.cursor() as cur:
                kind = one_transaction(cur, rng, serial)
            conn.commit()
        except pymysql.err.OperationalError as exc:
            print(f"loadgen: {exc}; reconnecting", file=sys.stderr)
            conn = connect(args)
            continue
        done[kind] = done.get(kind, 0) + 1
        alive.touch()
        if serial % 500 == 0:
            print(f"loadgen: {serial} transactions {done}", file=sys.stderr)
        next_at += interval
        time.sleep(max(0.0, next_at - time.monotonic()))
    conn.close()
    print(f"loadgen: stopped after {serial} transactions {done}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
