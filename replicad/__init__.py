"""replicad: a MySQL/MariaDB replica that decodes the binlog exactly and publishes row changes."""

# The one place the version is written (pyproject.toml reads it from here): every command and
# every message's source.version take it without importing importlib.metadata (a sizeable
# share of a short `replicad dump`).
__version__ = "0.1.0"
