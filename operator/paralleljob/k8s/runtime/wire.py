"""JSON on the wire to the API server: every request body the client sends and every answer and watch event
it reads goes through :func:`encode` and :func:`decode`, the one place that picks the codec.

orjson, because in a wave of pods the operator decodes each pod about five times (its create's answer and
its watched changes, ~4.5 KB each with managedFields) and encodes each once, and the standard library's
json took about a tenth of the operator's samples (py-spy, docs/benchmarks.md). The API server never sends
an integer outside int64 (its own decoder has none), so orjson's 64-bit integers lose nothing that arrives;
bodies the operator builds itself are plain dicts, lists, strings and numbers (integer keys written as
strings, as the standard library does), and one orjson cannot write (a number past 64 bits) is written by
the standard library.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def decode(data: bytes) -> Any:
    """One JSON document; :class:`ValueError` if ``data`` is not one (orjson's error is a ValueError)."""
    return orjson.loads(data)


def encode(body: Any) -> bytes:
    """``body`` as compact JSON in UTF-8."""
    try:
        return orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return json.dumps(body, separators=(",", ":")).encode()
