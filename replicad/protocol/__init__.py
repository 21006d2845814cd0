"""MySQL/MariaDB client protocol, as a replica needs it.

Sans-IO core (bytes in, events out): packets, handshake, auth, commands, connection.
`transport` is the only module that does I/O (asyncio).
"""

from replicad.protocol.auth import Secret
from replicad.protocol.commands import (
    BinlogDump,
    BinlogDumpGtid,
    Column,
    Ping,
    Query,
    Quit,
    RegisterSlave,
    ResultSet,
)
from replicad.protocol.connection import (
    NEED_DATA,
    BinlogEventPacket,
    Connection,
    ConnectionClosed,
    EndOfDump,
    Ok,
    Ready,
    State,
    TlsUpgradeNeeded,
)
from replicad.protocol.handshake import TlsConfig, TlsMode, build_ssl_context

__all__ = [
    "NEED_DATA",
    "BinlogDump",
    "BinlogDumpGtid",
    "BinlogEventPacket",
    "Column",
    "Connection",
    "ConnectionClosed",
    "EndOfDump",
    "Ok",
    "Ping",
    "Query",
    "Quit",
    "Ready",
    "RegisterSlave",
    "ResultSet",
    "Secret",
    "State",
    "TlsConfig",
    "TlsMode",
    "TlsUpgradeNeeded",
    "build_ssl_context",
]
