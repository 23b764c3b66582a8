"""What the operator keeps of each watched object: the parts its parsers read, not the whole body.

A kwok node's body with its ``managedFields`` is about 4.5 KB of JSON and 24 KB as Python dicts; kept whole
for 12,500 nodes that was 300 MB of the operator's memory, for fields nothing reads (managed fields, images,
node info, addresses, heartbeat times). Pods likewise: a worker carries its whole container (command, env,
mounts) and a status full of probe times, and a drained queue of 50,000 jobs leaves well over 100,000 of them.
Stores slim a body before keeping it, and list pages are slimmed before the next page is fetched. Slimming
is idempotent (a slimmed body slims to an equal one) and pure.

What a slimmed body must still carry: everything ``parse_*`` reads, plus ``kind``/``apiVersion``/``metadata``
identity (name, namespace, uid, resourceVersion), which Events about the object and the store's
newest-wins rule use.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from paralleljob.k8s.edge.constants import POD_GROUP_LABEL
from paralleljob.k8s.edge.parse.frozenjson import JsonRecord, record

# The node conditions' fields a parser reads; lastHeartbeatTime and friends change on every heartbeat.
CONDITION_FIELDS = ("type", "status", "reason", "message")
NODE_STATUS_FIELDS = ("allocatable", "conditions")


# What a pod's spec keeps (parse_pod: the node, the scheduler, a PodGroup's name, what it requests); a pod of a
# pod group keeps its whole spec: its node constraints are read from it as a ParallelJob's template is.
POD_SPEC_FIELDS = ("nodeName", "schedulerName", "schedulingGroup", "overhead")
POD_CONTAINER_FIELDS = ("name", "resources", "restartPolicy")
POD_STATUS_FIELDS = ("phase", "reason", "message")

# What ``kubectl apply`` keeps on the object: the whole manifest again as JSON (the spec a second time).
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def without_managed_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """The body minus ``metadata.managedFields`` (server-side apply bookkeeping, often half of a body)."""
    metadata = body.get("metadata")
    if not isinstance(metadata, Mapping) or "managedFields" not in metadata:
        return dict(body)
    return {**body, "metadata": {k: v for k, v in metadata.items() if k != "managedFields"}}


def _interned(mapping: Any) -> Any:
    """The same string map with its keys and values interned: every node repeats the same label keys and
    mostly the same values (architecture, GPU product, zone), and each decoded copy costs ~60-100 bytes."""
    if not isinstance(mapping, Mapping):
        return mapping
    return {sys.intern(k): sys.intern(v) if isinstance(v, str) else v for k, v in mapping.items()}


def slim_node(body: Mapping[str, Any]) -> dict[str, Any]:
    """A Node as ``parse_node`` reads it: metadata, spec, allocatable and the conditions' verdicts."""
    slim = without_managed_fields(body)
    metadata = slim.get("metadata")
    if isinstance(metadata, Mapping):
        slim["metadata"] = {
            **metadata,
            **{k: _interned(metadata[k]) for k in ("labels", "annotations") if k in metadata},
        }
    status = body.get("status")
    if isinstance(status, Mapping):
        kept: dict[str, Any] = {k: status[k] for k in NODE_STATUS_FIELDS if k in status}
        kept["allocatable"] = _interned(kept.get("allocatable"))
        conditions = kept.get("conditions")
        if isinstance(conditions, list):
            kept["conditions"] = [
                _interned({k: c[k] for k in CONDITION_FIELDS if k in c}) if isinstance(c, Mapping) else c
                for c in conditions
            ]
        slim["status"] = kept
    return slim


def slim_pod(body: Mapping[str, Any], sharing: Sharing | None = None) -> dict[str, Any]:
    """A Pod as ``parse_pod`` reads it: metadata, the spec's node, scheduler and requests (the whole spec for
    a pod-group member), the phase, and a terminated container's exit code and reason. The kept spec and
    status, and the metadata's maps, are shared with equal ones of other pods (:class:`Sharing`): a job's
    workers ask for the same resources, name the same owner, and end the same way, and a drained queue
    without TTLs keeps two or three finished workers per job (~5 KB each before)."""
    sharing = sharing or POD_PARTS
    slim = without_managed_fields(body)
    metadata = slim.get("metadata")
    if isinstance(metadata, Mapping):
        slim["metadata"] = {
            sys.intern(k): sharing.share(v) if k in SHARED_METADATA else v for k, v in metadata.items()
        }
    spec = body.get("spec")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    member = isinstance(labels, Mapping) and POD_GROUP_LABEL in labels
    if isinstance(spec, Mapping) and not member and not spec.get("schedulingGroup"):
        kept: dict[str, Any] = {k: spec[k] for k in POD_SPEC_FIELDS if k in spec}
        for section in ("containers", "initContainers"):
            containers = spec.get(section)
            if isinstance(containers, list):
                kept[section] = [_kept(c, POD_CONTAINER_FIELDS) for c in containers]
        slim["spec"] = sharing.share(kept)
    status = body.get("status")
    if isinstance(status, Mapping):
        reduced: dict[str, Any] = {k: status[k] for k in POD_STATUS_FIELDS if k in status}
        ended = [_terminated(cs) for cs in status.get("containerStatuses") or [] if isinstance(cs, Mapping)]
        if any(ended):
            reduced["containerStatuses"] = [cs for cs in ended if cs]
        slim["status"] = sharing.share(reduced)
    return {sys.intern(k) if type(k) is str else k: v for k, v in slim.items()}


def _kept(item: Any, fields: tuple[str, ...]) -> Any:
    return {k: item[k] for k in fields if k in item} if isinstance(item, Mapping) else item


def _terminated(status: Mapping[str, Any]) -> dict[str, Any] | None:
    """A container status reduced to its name and how it ended (None while it has not)."""
    state = status.get("state")
    terminated = state.get("terminated") if isinstance(state, Mapping) else None
    if not isinstance(terminated, Mapping):
        return None
    return {"name": status.get("name"), "state": {"terminated": _kept(terminated, ("exitCode", "reason"))}}


class Sharing:
    """One copy of each JSON value seen lately: a value equal to one kept here is replaced by the kept one.

    Thousands of ParallelJobs are made from one manifest: the same pod template, failure policy and shape,
    and statuses the operator wrote with the same words. Decoded, each job has its own copies (a flood job's
    spec and status were ~6 KB of dicts and strings each). Values are shared bottom-up (a dict whose values
    are all shared is looked up by their identities), so a template shared by many jobs is one object even
    when the jobs differ elsewhere. The values handed out are shared and must never be mutated: every
    reader of a stored body treats it as read-only (``pod_from_template`` deep-copies the template's spec
    and builds new label and annotation maps). Kept values are bounded (least recently used go first), so
    values seen once (a job's own times) cost nothing once the job is gone; equality is by type as well as
    value, so ``1``, ``1.0`` and ``True`` are never swapped for one another.
    """

    def __init__(self, capacity: int = 8192) -> None:
        self.capacity = capacity
        self._kept: OrderedDict[tuple[Any, ...], Any] = OrderedDict()

    def __len__(self) -> int:
        return len(self._kept)

    def share(self, value: Any) -> Any:
        if type(value) is str:  # not a str enum: those are their own shared objects
            return sys.intern(value)
        if isinstance(value, JsonRecord):  # made by :meth:`record`: shared already
            return value
        if isinstance(value, Mapping):
            items = self._items(value)
            return self._one(self._key("{", items), items)
        if isinstance(value, list):
            elements = [self.share(v) for v in value]
            key: list[Any] = ["["]
            for v in elements:
                key += (type(v), id(v) if isinstance(v, dict | list | JsonRecord) else v)
            return self._one(tuple(key), elements)
        return value

    def record(self, value: Mapping[str, Any]) -> JsonRecord:
        """``value`` as a shared :class:`JsonRecord` (its values shared as :meth:`share` shares them)."""
        items = self._items(value)
        key = self._key("R", items)
        kept = self._kept.get(key)
        return self._one(key, kept if kept is not None else record(items))  # type: ignore[no-any-return]

    def _items(self, value: Mapping[str, Any]) -> dict[str, Any]:
        return {sys.intern(k) if type(k) is str else k: self.share(v) for k, v in value.items()}

    @staticmethod
    def _key(tag: str, items: Mapping[str, Any]) -> tuple[Any, ...]:
        key: list[Any] = [tag]
        for k, v in items.items():
            key += (k, type(v), id(v) if isinstance(v, dict | list | JsonRecord) else v)
        return tuple(key)

    def _one(self, key: tuple[Any, ...], value: Any) -> Any:
        """The kept value equal to ``value`` (by ``key``: its type-tagged scalars and its shared parts'
        identities, which the kept value holds, so no identity is reused while its key is kept)."""
        kept = self._kept.get(key)
        if kept is not None:
            self._kept.move_to_end(key)
            return kept
        self._kept[key] = value
        if len(self._kept) > self.capacity:
            self._kept.popitem(last=False)
        return value


JOB_PARTS = Sharing()  # the reconciler's job store's: one per process, as the manifests are
POD_PARTS = Sharing()  # the pod store's
# The metadata of a pod that other pods repeat: a job's workers share its owner and most labels.
SHARED_METADATA = frozenset({"labels", "annotations", "ownerReferences", "namespace", "creationTimestamp"})


def slim_job(body: Mapping[str, Any], sharing: Sharing | None = None) -> dict[str, Any]:
    """A ParallelJob as ``parse_job`` reads it, without managed fields and ``kubectl apply``'s copy of the
    manifest, its spec and status shared with equal ones of other jobs (:class:`Sharing`): parsed, it equals
    the whole body's parse but for that annotation. Its own keys are interned too (each decoded body has
    its own ``"metadata"``, ``"resourceVersion"``...: ~600 bytes a job), and its own dicts are made at
    their final size."""
    sharing = sharing or JOB_PARTS
    slim: dict[str, Any] = {}
    for key, value in body.items():
        if key == "metadata" and isinstance(value, Mapping):
            value = _job_metadata(value, sharing)
        elif key == "status" and isinstance(value, Mapping):
            value = _job_status(value, sharing)
        elif key in ("spec", "status"):
            value = sharing.share(value)
        elif key in ("apiVersion", "kind") and type(value) is str:
            value = sys.intern(value)
        slim[sys.intern(key) if type(key) is str else key] = value
    return slim


def _job_status(status: Mapping[str, Any], sharing: Sharing) -> JsonRecord:
    """The status as a :class:`JsonRecord`, its conditions too (each job's own times and messages make its
    status and conditions its own: three dicts of 272 bytes a job, half that as records). Nested objects
    other than conditions (placement, costs, checkpoints) stay shared dicts."""
    items: dict[str, Any] = {}
    for key, value in status.items():
        if key == "conditions" and isinstance(value, list):
            value = [sharing.record(c) if _flat(c) else c for c in value]
        items[key] = value
    return sharing.record(items)


def _flat(value: Any) -> bool:
    """A JSON object of strings, numbers, booleans and nulls only (a condition)."""
    return isinstance(value, Mapping) and all(v is None or isinstance(v, str | int | float) for v in value.values())


def _job_metadata(metadata: Mapping[str, Any], sharing: Sharing) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for key, value in metadata.items():
        if key == "managedFields":
            continue
        if key == "annotations" and isinstance(value, Mapping) and LAST_APPLIED in value:
            value = {k: v for k, v in value.items() if k != LAST_APPLIED}
        if key in ("labels", "annotations", "ownerReferences", "namespace", "creationTimestamp"):
            value = sharing.share(value)  # the same for many jobs
        kept[sys.intern(key) if type(key) is str else key] = value
    return kept
