"""Optional dependencies (pyproject's extras): a command that needs one that is not installed
stops with one line naming the extra to install, not an ImportError's traceback."""

from __future__ import annotations

from replicad.errors import ConfigError


def missing_extra(extra: str, needed_by: str, key: str) -> ConfigError:
    return ConfigError(
        f"{needed_by} needs the `{extra}` extra, which is not installed: "
        f"pip install 'replicad[{extra}]'",
        key=key,
    )
