"""What a discovery command prints, read as the servers to stream from."""

from __future__ import annotations

import pytest

from replicad.source.discovery import DiscoveryError, parse_candidates

pytestmark = pytest.mark.unit


def test_lines_in_order_with_comments_blanks_and_repeats() -> None:
    text = "# from the orchestrator\n\ndb2.example:3306\n  [::1]:3307  # local\ndb2.example:3306\n"
    assert parse_candidates(text) == [("db2.example", 3306), ("::1", 3307)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "printed no host:port"),
        ("# nobody is primary\n\n", "printed no host:port"),
        ("db1:3306\ndb2\n", "line 2 is not host:port"),
        ("db1:0\n", "line 1 is not host:port"),
        ("db1:port\n", "line 1 is not host:port"),
    ],
)
def test_no_usable_list_is_an_error_naming_the_line(text: str, message: str) -> None:
    with pytest.raises(DiscoveryError, match=message):
        parse_candidates(text)
