"""An in-memory API server behind the operator's ``Kube`` seam, for testing the runtime without a cluster.

Only the transport is fake: ``FakeKube`` is a :class:`Kube` whose ``request`` is served from a dict of
objects, so ``list``, ``bind``, ``delete`` and ``merge_patch`` run the operator's own code and build the
same bodies they send to a real server. The semantics are the API server's where the runtime depends on
them: every write bumps a cluster-wide resourceVersion; create of an existing name is 409; PUT and merge
patches that carry ``metadata.resourceVersion`` or ``metadata.uid`` are refused with 409 when they no
longer match; DELETE honours ``preconditions.uid``; ``pods/binding`` is refused with 409 for a replaced
pod (UID) or one already bound, 404 for a missing one; writes are fenced like the real client's.

Faults are injected per request (``fail``: an HTTP status for the next N matching requests; ``hang``: a
caller's requests wait until released, as under a partition or a paused process) and every request is
recorded in ``calls``. Watches are not served: the runtime tests feed the stores by re-lists.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from paralleljob.k8s.runtime.api import ApiError, Kube, NotLeading
from paralleljob.k8s.runtime.lanes import BACKGROUND, Lanes

SUBRESOURCES = frozenset({"status", "binding"})


@dataclass
class Fault:
    method: str
    match: Callable[[str], bool]
    status: int
    times: int


class FakeApi:
    """The objects, shared by every client (replica) talking to it."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}  # object path -> body
        self.rv = itertools.count(1)
        self.uids = itertools.count(1)
        self.faults: list[Fault] = []
        self.calls: list[tuple[str, str, str]] = []  # (client, method, path)
        self.lanes: list[tuple[str, str, bool]] = []  # (method, path, sent as background: runtime/lanes.py)
        self.hanging: set[str] = set()
        self.on_request: Callable[[str, str], None] | None = None  # (method, path), before it is served
        self.latency: Callable[[str, str], float] | None = None  # (method, path) -> seconds its answer takes

    def client(self, who: str = "operator") -> FakeKube:
        return FakeKube(self, who)

    # ---- set-up and inspection -------------------------------------------------------------------------
    def seed(self, collection: str, body: dict[str, Any]) -> dict[str, Any]:
        """Put an object in as if created (fresh uid and resourceVersion unless given)."""
        return self._create(collection, copy.deepcopy(body), keep_uid=True)

    def get(self, path: str) -> dict[str, Any] | None:
        return self.objects.get(path)

    def items(self, collection: str) -> list[dict[str, Any]]:
        return list(self._list(collection)["items"])

    def fail(self, method: str, path_contains: str, status: int, times: int = 1) -> None:
        self.faults.append(Fault(method, lambda p: path_contains in p, status, times))

    def count(self, method: str, path_contains: str = "") -> int:
        return sum(1 for _, m, p in self.calls if m == method and path_contains in p)

    # ---- serving ---------------------------------------------------------------------------------------
    def serve(self, method: str, path: str, body: Any, query: dict[str, str]) -> dict[str, Any]:
        for fault in self.faults:
            if fault.times > 0 and fault.method == method and fault.match(path):
                fault.times -= 1
                raise ApiError(fault.status, f"injected {fault.status} for {method} {path}")
        if self.on_request is not None:
            self.on_request(method, path)
        obj_path, sub = _split(path)
        if method == "GET":
            if obj_path is None:
                return self._list(path)
            return copy.deepcopy(self._existing(obj_path))
        if method == "POST":
            if sub == "binding":
                return self._bind(obj_path, body)
            if obj_path is not None:
                raise ApiError(405, f"POST to an object path {path}")
            return copy.deepcopy(self._create(path, copy.deepcopy(body)))
        assert obj_path is not None, f"{method} needs an object path: {path}"
        if method == "PUT":
            return self._put(obj_path, body, sub)
        if method == "PATCH":
            return self._patch(obj_path, body, sub)
        if method == "DELETE":
            return self._delete(obj_path, body or {})
        raise ApiError(405, f"{method} not served")

    def _existing(self, obj_path: str) -> dict[str, Any]:
        current = self.objects.get(obj_path)
        if current is None:
            raise ApiError(404, f"{obj_path} not found", "NotFound")
        return current

    def _list(self, collection: str) -> dict[str, Any]:
        collection = collection.rstrip("/")
        if "/namespaces/" in collection:
            items = [b for p, b in sorted(self.objects.items()) if p.rpartition("/")[0] == collection]
        else:  # a cluster-wide list (/api/v1/pods) holds the kind's objects of every namespace
            items = [
                b for p, b in sorted(self.objects.items()) if _without_namespace(p).rpartition("/")[0] == collection
            ]
        return {"items": copy.deepcopy(items), "metadata": {"resourceVersion": str(next(self.rv))}}

    def _create(self, collection: str, body: dict[str, Any], keep_uid: bool = False) -> dict[str, Any]:
        meta = body.setdefault("metadata", {})
        name = meta.get("name") or f"{meta.get('generateName', 'obj-')}{next(self.uids)}"
        obj_path = f"{collection.rstrip('/')}/{name}"
        if obj_path in self.objects:
            raise ApiError(409, f"{obj_path} already exists", "AlreadyExists")
        meta["name"] = name
        parts = collection.split("/")
        if "namespaces" in parts:
            meta["namespace"] = parts[parts.index("namespaces") + 1]
        if not (keep_uid and meta.get("uid")):
            meta["uid"] = f"uid-{next(self.uids)}"
        meta["resourceVersion"] = str(next(self.rv))
        meta.setdefault("creationTimestamp", "2024-01-01T00:00:00Z")
        self.objects[obj_path] = body
        return body

    def _preconditions(self, current: dict[str, Any], meta: dict[str, Any]) -> None:
        rv, uid = meta.get("resourceVersion"), meta.get("uid")
        if rv is not None and str(rv) != current["metadata"]["resourceVersion"]:
            raise ApiError(409, "the object has been modified; please apply your changes to the latest version")
        if uid is not None and uid != current["metadata"]["uid"]:
            raise ApiError(409, f"Precondition failed: UID in precondition: {uid}", "Conflict")

    def _put(self, obj_path: str, body: dict[str, Any], sub: str | None) -> dict[str, Any]:
        current = self._existing(obj_path)
        self._preconditions(current, body.get("metadata") or {})
        new = copy.deepcopy(body)
        new["metadata"] = {**current["metadata"], **new.get("metadata", {}), "uid": current["metadata"]["uid"]}
        new["metadata"]["resourceVersion"] = str(next(self.rv))
        self.objects[obj_path] = new
        return copy.deepcopy(new)

    def _patch(self, obj_path: str, patch: dict[str, Any], sub: str | None) -> dict[str, Any]:
        current = self._existing(obj_path)
        self._preconditions(current, patch.get("metadata") or {})
        if sub == "status":
            patch = {"status": patch.get("status") or {}}
        new = merge_patch(current, {k: v for k, v in patch.items() if k != "metadata"})
        meta_patch = {k: v for k, v in (patch.get("metadata") or {}).items() if k not in ("resourceVersion", "uid")}
        new["metadata"] = merge_patch(current["metadata"], meta_patch)
        new["metadata"]["resourceVersion"] = str(next(self.rv))
        self.objects[obj_path] = new
        return copy.deepcopy(new)

    def _delete(self, obj_path: str, options: dict[str, Any]) -> dict[str, Any]:
        current = self._existing(obj_path)
        uid = (options.get("preconditions") or {}).get("uid")
        if uid is not None and uid != current["metadata"]["uid"]:
            raise ApiError(409, f"Precondition failed: UID in precondition: {uid}", "Conflict")
        del self.objects[obj_path]
        return copy.deepcopy(current)  # deleted at once, as kwok's pods are: no deletionTimestamp

    def _bind(self, obj_path: str | None, binding: dict[str, Any]) -> dict[str, Any]:
        assert obj_path is not None
        pod = self._existing(obj_path)
        uid = (binding.get("metadata") or {}).get("uid")
        if uid and uid != pod["metadata"]["uid"]:
            raise ApiError(409, f"Precondition failed: UID in precondition: {uid}", "Conflict")
        if (pod.get("spec") or {}).get("nodeName"):
            raise ApiError(409, f"pod {obj_path} is already assigned to node {pod['spec']['nodeName']}", "Conflict")
        pod.setdefault("spec", {})["nodeName"] = binding["target"]["name"]
        pod.setdefault("status", {})["phase"] = "Running"
        pod["metadata"]["resourceVersion"] = str(next(self.rv))
        return {"kind": "Status", "status": "Success"}

    def pods_of(self, namespace: str, job: str) -> list[dict[str, Any]]:
        return [
            p
            for p in self.items(f"/api/v1/namespaces/{namespace}/pods")
            if (p["metadata"].get("labels") or {}).get("paralleljob.dev/job") == job
        ]


class FakeKube(Kube):
    """One client of a :class:`FakeApi` (one operator replica), with the real client's write fence."""

    def __init__(self, api: FakeApi, who: str = "operator") -> None:  # no super(): no configuration, no session
        self.fake = api
        self.who = who
        self.write_fence = None
        self.limit = Lanes(48)

    async def close(self) -> None:
        return None

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Any = None,
        content_type: str = "application/json",
        fenced: bool = True,
        first: bool = False,  # the lane of a list's pages; the fake serves every request at once
    ) -> dict[str, Any]:
        while self.who in self.fake.hanging:
            await asyncio.sleep(0.005)
        if fenced and method != "GET" and self.write_fence is not None and not self.write_fence():
            raise NotLeading(method, path)
        self.fake.calls.append((self.who, method, path))
        self.fake.lanes.append((method, path, BACKGROUND.get()))  # which lane the real client would use
        await asyncio.sleep(0)  # a request is never synchronous: let other tasks interleave
        if self.fake.latency is not None:
            await asyncio.sleep(self.fake.latency(method, path))
        return self.fake.serve(method, path, copy.deepcopy(body), dict(query or {}))

    async def watch(self, *args: Any, **kwargs: Any) -> Iterator[dict[str, Any]]:  # type: ignore[override]
        raise NotImplementedError("FakeKube serves no watches; feed the stores by re-lists")


def _split(path: str) -> tuple[str | None, str | None]:
    """(object path, subresource) of a request path; (None, None) for a collection."""
    parts = path.strip("/").split("/")
    rest = parts[2:] if parts[0] == "api" else parts[3:]  # after /api/v1 or /apis/<group>/<version>
    head = len(parts) - len(rest)
    if rest and rest[0] == "namespaces" and len(rest) >= 3:
        rest_head, rest = rest[:2], rest[2:]
        head += len(rest_head)
    # rest is now [plural] or [plural, name] or [plural, name, subresource]
    if len(rest) <= 1:
        return None, None
    obj = "/" + "/".join(parts[: head + 2])
    sub = rest[2] if len(rest) > 2 and rest[2] in SUBRESOURCES else None
    return obj, sub


def _without_namespace(path: str) -> str:
    parts = path.split("/")
    if "namespaces" in parts:
        i = parts.index("namespaces")
        del parts[i : i + 2]
    return "/".join(parts)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge key by key, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out
