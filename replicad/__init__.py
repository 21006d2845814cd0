"""replicad: a MySQL/MariaDB replica that decodes the binlog exactly and publishes row changes."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("replicad")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
