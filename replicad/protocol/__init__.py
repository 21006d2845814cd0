"""MySQL/MariaDB client protocol, as a replica needs it.

Sans-IO core (bytes in, events out): packets, handshake, auth, commands, connection.
`transport` is the only module that does I/O (asyncio).
"""

from replicad.protocol.auth import Secret
from replicad.protocol.commands import (
    BinlogDump,
    BinlogDumpGtid,
    Ping,
    Query,
    Quit,
    RegisterSlave,
    ResultColumn,
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
from replicad.protocol.handshake import TlsMode, TlsSettings, build_ssl_context

__all__ = [
    "NEED_DATA",
    "BinlogDump",
    "BinlogDumpGtid",
    "BinlogEventPacket",
    "Connection",
    "ConnectionClosed",
    "EndOfDump",
    "Ok",
    "Ping",
    "Query",
    "Quit",
    "Ready",
    "RegisterSlave",
    "ResultColumn",
    "ResultSet",
    "Secret",
    "State",
    "TlsMode",
    "TlsSettings",
    "TlsUpgradeNeeded",
    "build_ssl_context",
]
