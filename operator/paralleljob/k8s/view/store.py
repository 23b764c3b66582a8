"""In-memory copies of the objects the operator watches, fed by watch events, full re-lists and the
operator's own write responses.

Those sources interleave in any order: the watch is ordered, but a write's response may be handled before
or after the watch delivers the same change, and a re-list may be answered after later events were seen.
Three rules keep the copies honest:

1. **Newest wins.** An object older than the stored copy (by resourceVersion) is ignored, so a late watch
   event or response never undoes something newer already recorded here.
2. **Deletions match by UID.** A deletion removes only the object with the same UID, so the DELETED event
   of a pod that was replaced under the same name never removes its successor.
3. **Gone stays gone.** Every removal leaves a *tombstone* (namespace, name, UID, resourceVersion): no
   body of that UID at or below that resourceVersion is accepted again. A DELETED event carries the
   object's last resourceVersion, so nothing older can bring it back; the operator's own confirmed
   deletions (:meth:`ObjectStore.forget`) know no version and block the UID outright; an object missing
   from a re-list is tombstoned at the list's version. This is what stops a DELETE response (a body with a
   deletionTimestamp) that is handled after the watch's DELETED event from resurrecting the pod.

Tombstones are bounded: each expires ``tombstone_ttl`` seconds after it was laid (longer than any request
may take, including retries, so no stale body can still be on its way), expired ones are compacted on
every write, and at most ``max_tombstones`` are kept (the oldest go first). A body of a tombstoned UID
with a newer resourceVersion (it was only filtered out, not deleted) is accepted and lifts the tombstone.

A list is the one read that can take longer than that: 50,000 ParallelJobs are 100 pages, each queued
behind the operator's writes, ~30 s a page under a 50,000-job flood. Its pages hold every
object as it was when the list began, so a job deleted meanwhile (the TTL of a finished job) came back,
with the placement it held when the list began, once its tombstone had expired before the last page was
in; its record then claimed GPUs already given to newer jobs, which lost their placements (a 50,000-job
flood requeued or rescheduled 626 jobs so). The reflector therefore wraps each list in
:meth:`ObjectStore.listing`: a tombstone laid after a list still being fetched began does not expire
before that list is merged.

Readers that keep something derived alive (the incremental cluster view) drain :meth:`ObjectStore.take_changes`:
the keys whose parsed value changed since the last drain, in no particular order, and whether the store was
re-listed meanwhile (then they start over). The store also numbers each object by arrival, so a reader can
put a few objects back in the store's own order without scanning it.

A store made with ``keep_bodies=False`` keeps each object's identity (UID and resourceVersion) beside its
parsed value instead of its body, for kinds whose parsed value is all anyone reads (the reconciler's
ParallelJobs: with 50,000 waiting, the kept bodies' own dicts were ~700 bytes a job of the operator's
memory). Two versions with the same UID and resourceVersion are the same object, as the API server
promises, so nothing is lost but :meth:`ObjectStore.body` and :meth:`ObjectStore.patch_local`.

resourceVersions are opaque to clients in general; every etcd-backed API server uses the etcd revision,
so they are compared as integers when both parse; when one does not, the newest arrival wins, except
against a tombstone, which then holds.
"""

from __future__ import annotations

import contextlib
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")

Body = Mapping[str, Any]

TOMBSTONE_TTL_SECONDS = 300.0
MAX_TOMBSTONES = 65536
MAX_PENDING_CHANGES = 100_000  # undrained changed keys kept; beyond, the reader is told to start over


def _rv(body: Body) -> int | None:
    value = (body.get("metadata") or {}).get("resourceVersion")
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return None


def _uid(body: Body) -> str:
    return str((body.get("metadata") or {}).get("uid") or "")


def object_key(body: Body) -> tuple[str, str]:
    metadata = body.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def _same_but_version(a: Body, b: Body) -> bool:
    """Whether two bodies are equal apart from ``metadata.resourceVersion``."""
    if a.keys() != b.keys():
        return False
    for field, value in a.items():
        other = b[field]
        if field == "metadata" and isinstance(value, Mapping) and isinstance(other, Mapping):
            if value.keys() != other.keys() or any(
                value[k] != other[k] for k in value if k != "resourceVersion"
            ):
                return False
        elif value != other:
            return False
    return True


@dataclass(frozen=True, slots=True)
class Version:
    """Which version of an object a store without bodies holds. :meth:`ObjectStore.slim_listed` hands the
    stored one itself to a re-list for an object listed at that very version (no new object kept for it
    until the last page is in); the list counts it as seen and nothing is parsed again."""

    key: tuple[str, str]
    uid: str
    rv: int | None


@dataclass(frozen=True, slots=True)
class Tombstone:
    up_to: int | None  # no body of the UID at or below this resourceVersion is accepted; None: none at all
    expires: float

    def blocks(self, rv: int | None) -> bool:
        return self.up_to is None or rv is None or rv <= self.up_to


class ObjectStore(Generic[T]):
    """Raw bodies plus a parsed value per object (parsed once, on arrival)."""

    def __init__(
        self,
        parse: Callable[[Body], T],
        clock: Callable[[], float] = time.monotonic,
        slim: Callable[[Body], Body] | None = None,
        tombstone_ttl: float = TOMBSTONE_TTL_SECONDS,
        max_tombstones: int = MAX_TOMBSTONES,
        keep_bodies: bool = True,
    ) -> None:
        self._parse = parse
        self._clock = clock
        # What is kept of a body (slim.py): the parts the parser reads; the whole body by default.
        self.slim: Callable[[Body], Body] = slim or (lambda body: body)
        self._ttl = tombstone_ttl
        self._max_tombstones = max_tombstones
        self.keep_bodies = keep_bodies
        self._bodies: dict[tuple[str, str], Body] = {}
        self._versions: dict[tuple[str, str], Version] = {}  # kept instead of bodies (keep_bodies=False)
        self._values: dict[tuple[str, str], T] = {}
        # (namespace, name, uid) -> tombstone, oldest first (laid in clock order, so expiry is from the front)
        self._tombstones: OrderedDict[tuple[str, str, str], Tombstone] = OrderedDict()
        self.version = 0  # bumped on every change, so readers can cache what they derive
        self._changed: dict[tuple[str, str], None] = {}  # keys changed since the last take_changes
        self._lost_track = False  # too many undrained changes (or a re-list): the reader must start over
        self._arrivals = 0
        self._arrival: dict[tuple[str, str], int] = {}  # key -> its place in the store's (dict) order
        self._lists: list[float] = []  # when each list being fetched began (a store may have one per namespace)

    def __len__(self) -> int:
        return len(self._values)

    @property
    def tombstones(self) -> int:
        return len(self._tombstones)

    def values(self) -> list[T]:
        return list(self._values.values())

    def items(self) -> Iterator[tuple[tuple[str, str], T]]:
        return iter(list(self._values.items()))

    def get(self, namespace: str, name: str) -> T | None:
        return self._values.get((namespace, name))

    def body(self, namespace: str, name: str) -> Body | None:
        if not self.keep_bodies:
            raise TypeError("this store keeps no bodies (keep_bodies=False)")
        return self._bodies.get((namespace, name))

    def slim_listed(self, body: Body) -> Body | Version:
        """``body`` slimmed for a list page, or what is stored of it when it is unchanged since the last
        list (the stored body when equal; a store without bodies: its :class:`Version`, when it holds that
        very version). A re-list holds every item until the last page is in: without this, each re-list of
        50,000 ParallelJobs held a second copy of each for a moment (the operator's RSS keeps such a peak),
        though the store then keeps what it has anyway (``upsert``: equal, not replaced)."""
        if not self.keep_bodies:
            version = self._versions.get(object_key(body))
            rv = _rv(body)
            if version is not None and rv is not None and version.rv == rv and version.uid == _uid(body):
                return version
            return self.slim(body)
        slim = self.slim(body)
        kept = self._bodies.get(object_key(slim))
        return kept if kept is not None and kept == slim else slim

    @contextlib.contextmanager
    def listing(self) -> Iterator[None]:
        """A list of this kind is being fetched (and merged with :meth:`replace_all` inside): tombstones laid
        from now on outlive it, however long its pages take, so none of its pages can bring back an object
        deleted after it began."""
        began = self._clock()
        self._lists.append(began)
        try:
            yield
        finally:
            self._lists.remove(began)

    def arrival(self, key: tuple[str, str]) -> int:
        """The object's place in :meth:`values` order (larger: later); -1 when it is not stored."""
        return self._arrival.get(key, -1)

    def take_changes(self) -> tuple[list[tuple[str, str]], bool]:
        """Keys whose value changed (added, changed, removed) since the last call, and whether the reader
        must start over from :meth:`values` instead (a re-list happened, or too much changed to track)."""
        changed, restart = list(self._changed), self._lost_track
        self._changed.clear()
        self._lost_track = False
        return changed, restart

    def _mark(self, key: tuple[str, str]) -> None:
        self.version += 1
        self._changed[key] = None
        if len(self._changed) > MAX_PENDING_CHANGES:
            self._changed.clear()
            self._lost_track = True

    def upsert(self, body: Body, slimmed: bool = False) -> bool:
        """Store ``body`` unless an equal or newer version of the same object is already here, or the
        object was removed at or after this version (a tombstone). True when what the operator sees of it
        changed (a node's heartbeat alone does not change its parsed value). ``slimmed``: ``body`` went
        through :attr:`slim` already (a reflector's list page)."""
        self._compact()
        if not slimmed:
            body = self.slim(body)
        key = object_key(body)
        new_rv = _rv(body)
        grave = (*key, _uid(body))
        tombstone = self._tombstones.get(grave)
        if tombstone is not None:
            if tombstone.blocks(new_rv):
                return False
            del self._tombstones[grave]  # a newer version of it: it is back for real
        known = self._ident(key)
        if known is not None:
            old_uid, old_rv = known
            if new_rv is not None and old_rv is not None and new_rv < old_rv:
                return False
            same_version = old_uid == _uid(body) and new_rv is not None and new_rv == old_rv
            if not self.keep_bodies:
                if same_version:  # the API server's promise: one version of one object has one content
                    return False
            elif same_version and self._bodies[key] == body:
                return False
            elif old_uid == _uid(body) and _same_but_version(self._bodies[key], body):
                # A newer version whose kept part did not change (a node's status report, slimmed of its
                # heartbeat times): the parsed value stands, so it is not parsed again.
                self._bodies[key] = body
                return False
        if known is not None and known[0] != _uid(body):
            # Another object under the same name, newer: the one stored was deleted before it was made, so
            # none of its versions may come back (a late response for it, after the replacement is gone too).
            self._bury(key, known[0], new_rv)
        value = self._parse(body)
        before = self._values.get(key)
        if key not in self._values:
            self._arrivals += 1
            self._arrival[key] = self._arrivals
        self._keep(key, body)
        self._values[key] = value
        if known is not None and before == value:
            return False
        self._mark(key)
        return True

    def remove(self, body: Body, deleted: bool = True) -> bool:
        """The object is gone (a DELETED event: tombstoned even when not stored, since its creation's
        response may still be on its way), or with ``deleted=False`` it merely stopped being of interest
        as of its resourceVersion (tombstoned only if it was stored and not newer). Forgets the stored
        copy if it is the same object (same UID). True when the store changed."""
        self._compact()
        key = object_key(body)
        uid, rv = _uid(body), _rv(body)
        known = self._ident(key)
        same = known is not None and known[0] == uid
        if not deleted:
            old_rv = known[1] if known is not None else None
            if not same or (rv is not None and old_rv is not None and rv < old_rv):
                return False
        self._bury(key, uid, rv)
        if not same:
            return False
        self._drop(key)
        return True

    def forget(self, namespace: str, name: str, uid: str) -> None:
        """The operator itself deleted it (and the API confirmed): drop it now, do not wait for the watch,
        and accept no body of that UID again."""
        self._compact()
        self._bury((namespace, name), uid, None)
        known = self._ident((namespace, name))
        if known is not None and known[0] == uid:
            self._drop((namespace, name))

    def patch_local(self, namespace: str, name: str, change: Callable[[Body], Body]) -> None:
        """Apply a change the API has confirmed but whose new version has not been seen yet (a binding:
        the API answers with a Status, not the pod). ``change`` returns a new body and must not mutate
        the old one. The resourceVersion stays, so the real update wins. Only a store that keeps bodies
        can (a store without them takes a version it has as the very one it has)."""
        if not self.keep_bodies:
            raise TypeError("this store keeps no bodies (keep_bodies=False)")
        current = self._bodies.get((namespace, name))
        if current is None:
            return
        updated = self.slim(change(current))
        self._bodies[(namespace, name)] = updated
        self._values[(namespace, name)] = self._parse(updated)
        self._mark((namespace, name))

    def replace_all(
        self,
        bodies: Iterable[Body | Version],
        list_rv: str | None,
        namespace: str | None = None,
        slimmed: bool = False,
    ) -> None:
        """Merge a full list: upsert each (a :class:`Version` is what the store has, or had until something
        newer came), and drop stored objects the list no longer has unless they are newer than the list
        itself (created after it was taken); each dropped one is tombstoned at the list's version. With
        ``namespace``, the list was of that namespace only: objects of others stay. Readers of
        :meth:`take_changes` start over after it."""
        self._lost_track = True
        seen = set()
        for body in bodies:
            if isinstance(body, Version):
                seen.add(body.key)
                continue
            seen.add(object_key(body))
            self.upsert(body, slimmed)
        try:
            horizon = int(list_rv) if list_rv is not None else None
        except ValueError:
            horizon = None
        for key in list(self._values):
            if key in seen or (namespace is not None and key[0] != namespace):
                continue
            uid, rv = self._ident(key) or ("", None)
            if horizon is None or rv is None or rv <= horizon:
                self._bury(key, uid, horizon if horizon is not None else rv)
                self._drop(key)

    # ---- internals ----------------------------------------------------------------------------------
    def _ident(self, key: tuple[str, str]) -> tuple[str, int | None] | None:
        """The stored object's (uid, resourceVersion); None when none is stored."""
        if not self.keep_bodies:
            kept = self._versions.get(key)
            return None if kept is None else (kept.uid, kept.rv)
        current = self._bodies.get(key)
        return None if current is None else (_uid(current), _rv(current))

    def _keep(self, key: tuple[str, str], body: Body) -> None:
        if self.keep_bodies:
            self._bodies[key] = body
        else:
            prior = self._versions.get(key)
            self._versions[key] = Version(prior.key if prior is not None else key, _uid(body), _rv(body))

    def _drop(self, key: tuple[str, str]) -> None:
        self._bodies.pop(key, None)
        self._versions.pop(key, None)
        del self._values[key]
        del self._arrival[key]
        self._mark(key)

    def _bury(self, key: tuple[str, str], uid: str, rv: int | None) -> None:
        grave = (*key, uid)
        old = self._tombstones.pop(grave, None)
        if old is not None and (old.up_to is None or (rv is not None and old.up_to > rv)):
            rv = old.up_to  # a tombstone only ever grows
        self._tombstones[grave] = Tombstone(rv, self._clock() + self._ttl)
        while len(self._tombstones) > self._max_tombstones:
            self._tombstones.popitem(last=False)

    def _compact(self) -> None:
        now = self._clock()
        # Tombstones are in the order they were laid: the first laid since the oldest list began, and all
        # after it, wait for that list (laid at or after it began <=> expiring at or after it began + TTL).
        kept_from = min(self._lists) + self._ttl if self._lists else None
        while self._tombstones:
            grave, tombstone = next(iter(self._tombstones.items()))
            if tombstone.expires > now or (kept_from is not None and tombstone.expires >= kept_from):
                return
            del self._tombstones[grave]
