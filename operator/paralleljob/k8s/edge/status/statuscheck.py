"""Did a status write take? The fields of a merge patch the API server did not keep.

The API server prunes every field its CRD's structural schema does not declare, silently (no warning on a
status patch). An operator that then compares what it wants with what it reads back writes the same patch
again on every pass, for ever: a ParallelJob CRD two releases old, or a field added to the operator but
forgotten in ``crds/``, turned every repaired job into a reconcile loop once. The executor therefore
compares each status patch with the object the API returned and reports what was dropped, by path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def dropped_fields(patch: Mapping[str, Any], stored: Mapping[str, Any], prefix: str = "status") -> list[str]:
    """Paths of ``patch`` (a JSON merge patch) whose values are not what ``stored`` holds. A ``None`` in the
    patch removes a field and is never reported: a field already absent is what it asked for."""
    dropped: list[str] = []
    for key, value in patch.items():
        path = f"{prefix}.{key}"
        if value is None:
            continue
        if key not in stored:
            dropped.append(path)
        elif isinstance(value, Mapping):
            held = stored[key]
            if isinstance(held, Mapping):
                dropped.extend(dropped_fields(value, held, path))
            else:
                dropped.append(path)
        elif not same_json(value, stored[key]):
            dropped.append(path)
    return dropped


def same_json(written: Any, stored: Any) -> bool:
    """Equal as JSON values, with every field of ``written`` kept in ``stored`` (a stored object may hold
    more: defaults the schema fills in). 1 and 1.0 are the same number, as they are on the wire."""
    if isinstance(written, Mapping):
        return isinstance(stored, Mapping) and all(
            k in stored and same_json(v, stored[k]) for k, v in written.items() if v is not None
        )
    if isinstance(written, list):
        return (
            isinstance(stored, list)
            and len(written) == len(stored)
            and all(same_json(w, s) for w, s in zip(written, stored, strict=True))
        )
    if isinstance(written, bool) or isinstance(stored, bool):
        return written is stored
    return bool(written == stored)
