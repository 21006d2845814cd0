"""Process exit statuses (sysexits.h where one fits), in a module of their own so that the
errors (replicad.errors) can name the status they end a run with and the service layer can
read it, without either importing the other's layer."""

from __future__ import annotations

EXIT_OK = 0
EXIT_CHECK_FAILED = 1  # `check` found something that would stop replication
EXIT_USAGE = 64  # EX_USAGE
EXIT_DATA_ERROR = 65  # EX_DATAERR: the input could not be decoded
EXIT_TEMPFAIL = 75  # EX_TEMPFAIL: transient failure; a restart may succeed
EXIT_CONFIG = 78  # EX_CONFIG: configuration, credentials or position need an operator
