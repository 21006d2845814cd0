"""What the daemon and the readers of the stream it publishes (`spark/`, `invalidate/`) share,
so that neither reads the other's internals: topic names (`topics`), the Kafka clients and the
security, TLS and SASL settings they share (`kafka_clients`), exit codes for errors (`exits`)
the metrics and health endpoints (`http`), and a message's key or value, JSON or Avro, in
the JSON payload's form (`message_values`, `avro_json`). Imports only `config`, `errors` and
`exit_codes`."""
