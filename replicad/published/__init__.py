"""What the daemon and the readers of the stream it publishes (`spark/`, `invalidate/`) share,
so that neither reads the other's internals: topic names (`topics`), exit codes for errors
(`exits`) and the metrics and health endpoints (`http`). Imports only `config` and `errors`."""
