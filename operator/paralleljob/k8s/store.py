"""In-memory copies of the objects the operator watches, fed by watch events, full re-lists and the
operator's own write responses.

Two rules keep the copies honest when those sources interleave:
- an update older than what is stored (by resourceVersion) is ignored, so a late watch event never undoes
  what the operator just wrote and already recorded here;
- a deletion only removes the object with the same UID, so the DELETED event of a pod that was replaced
  under the same name never removes its successor.
resourceVersions are opaque to clients in general; every etcd-backed API server uses the etcd revision,
so they are compared as integers when both parse, and otherwise the newest arrival wins.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Generic, TypeVar

T = TypeVar("T")

Body = Mapping[str, Any]


def _rv(body: Body) -> int | None:
    value = (body.get("metadata") or {}).get("resourceVersion")
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def object_key(body: Body) -> tuple[str, str]:
    metadata = body.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


class ObjectStore(Generic[T]):
    """Raw bodies plus a parsed value per object (parsed once, on arrival)."""

    def __init__(self, parse: Callable[[Body], T]) -> None:
        self._parse = parse
        self._bodies: dict[tuple[str, str], Body] = {}
        self._values: dict[tuple[str, str], T] = {}
        self.version = 0  # bumped on every change, so readers can cache what they derive

    def __len__(self) -> int:
        return len(self._bodies)

    def values(self) -> list[T]:
        return list(self._values.values())

    def items(self) -> Iterator[tuple[tuple[str, str], T]]:
        return iter(list(self._values.items()))

    def get(self, namespace: str, name: str) -> T | None:
        return self._values.get((namespace, name))

    def body(self, namespace: str, name: str) -> Body | None:
        return self._bodies.get((namespace, name))

    def upsert(self, body: Body) -> bool:
        """Store ``body`` unless an equal or newer version of the same object is already here. True when
        what the operator sees of it changed (a node's heartbeat alone does not change its parsed value)."""
        key = object_key(body)
        current = self._bodies.get(key)
        if current is not None:
            new_rv, old_rv = _rv(body), _rv(current)
            same_uid = (current.get("metadata") or {}).get("uid") == (body.get("metadata") or {}).get("uid")
            if new_rv is not None and old_rv is not None and new_rv < old_rv:
                return False
            if same_uid and new_rv is not None and new_rv == old_rv and current == body:
                return False
        value = self._parse(body)
        before = self._values.get(key)
        self._bodies[key] = body
        self._values[key] = value
        if current is not None and before == value:
            return False
        self.version += 1
        return True

    def remove(self, body: Body) -> bool:
        """Forget the object if the stored copy is the same one (same UID) and not newer."""
        key = object_key(body)
        current = self._bodies.get(key)
        if current is None:
            return False
        uid = (body.get("metadata") or {}).get("uid")
        if uid and (current.get("metadata") or {}).get("uid") != uid:
            return False
        new_rv, old_rv = _rv(body), _rv(current)
        if new_rv is not None and old_rv is not None and new_rv < old_rv:
            return False
        del self._bodies[key]
        del self._values[key]
        self.version += 1
        return True

    def forget(self, namespace: str, name: str, uid: str) -> None:
        """The operator itself deleted it (and the API confirmed): drop it now, do not wait for the watch."""
        current = self._bodies.get((namespace, name))
        if current is not None and (current.get("metadata") or {}).get("uid") == uid:
            del self._bodies[(namespace, name)]
            del self._values[(namespace, name)]
            self.version += 1

    def patch_local(self, namespace: str, name: str, change: Callable[[Body], Body]) -> None:
        """Apply a change the API has confirmed but whose new version has not been seen yet (a binding:
        the API answers with a Status, not the pod). ``change`` returns a new body and must not mutate
        the old one. The resourceVersion stays, so the real update wins."""
        current = self._bodies.get((namespace, name))
        if current is None:
            return
        updated = change(current)
        self._bodies[(namespace, name)] = updated
        self._values[(namespace, name)] = self._parse(updated)
        self.version += 1

    def replace_all(self, bodies: Iterable[Body], list_rv: str | None) -> None:
        """Merge a full list: upsert each, and drop stored objects the list no longer has unless they are
        newer than the list itself (created after it was taken)."""
        seen = set()
        for body in bodies:
            seen.add(object_key(body))
            self.upsert(body)
        try:
            horizon = int(list_rv) if list_rv is not None else None
        except ValueError:
            horizon = None
        for key in list(self._bodies):
            if key in seen:
                continue
            rv = _rv(self._bodies[key])
            if horizon is None or rv is None or rv <= horizon:
                del self._bodies[key]
                del self._values[key]
                self.version += 1
