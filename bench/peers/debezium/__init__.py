"""Debezium, run beside replicad (issue 32): see connect.py and README.md."""

from bench.peers.debezium.connect import (
    DebeziumConnect,
    DebeziumError,
    DebeziumOptions,
    fetch,
)

__all__ = ["DebeziumConnect", "DebeziumError", "DebeziumOptions", "fetch"]
