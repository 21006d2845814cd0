"""The local relay log: durable segments of the raw binlog events of committed transactions
(docs/relay-format.md). `records` frames bytes into checksummed 64 KiB blocks, `segment` encodes
what the records hold; both are sans-IO. The writer, readers and recovery do the file I/O."""
