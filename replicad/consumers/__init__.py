"""Consumer-side helpers: reading what replicad publishes (no Kafka client here)."""
