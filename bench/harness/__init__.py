"""What every benchmark shares: paths, the local MariaDB, Kafka, child processes, /proc
figures, `replicad run` as a process, and the result tables."""
