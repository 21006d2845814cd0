"""What the daemon and the readers of the stream it publishes (`spark/`, `invalidate/`) share,
so that neither reads the other's internals: topic names (`topics`), the Kafka clients and the
security, TLS and SASL settings they share (`kafka_clients`), exit codes for errors (`exits`)
and the metrics and health endpoints (`http`). Imports only `config`, `errors` and
`exit_codes`."""
