"""HTTP GET for tests of replicad's endpoints (/metrics, /healthz, /readyz)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    """(status, body); status 0 when nothing answers (not listening yet, or gone)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:  # 503 and friends still carry a body
        return exc.code, exc.read().decode()
    except OSError as exc:
        return 0, str(exc)


def http_json(url: str, timeout: float = 5.0) -> tuple[int, Any]:
    """(status, parsed JSON body, or the text when it is not JSON)."""
    status, body = http_get(url, timeout)
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


def sample(text: str, name: str, **labels: str) -> float | None:
    """One sample's value from the Prometheus text format (None: absent)."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None
