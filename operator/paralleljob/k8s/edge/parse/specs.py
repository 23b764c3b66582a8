"""ParallelJob objects parsed at the edge: the spec into the core's :class:`JobSpec` plus the operator's
policies, the status into a phase and a placement record. Parsing never raises: a spec the core refuses
(it passed the API's schema but not the core's checks) comes back with ``invalid`` saying what to fix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

from paralleljob.core.elastic import ElasticRange
from paralleljob.core.errors import InvalidRequest
from paralleljob.core.failure.recovery import RecoveryStrategy
from paralleljob.core.failure.repair import DEFAULT_FAILURE_POLICY, FailurePolicy, OnUnplaceable, ReoptimizePolicy
from paralleljob.core.job import MAX_HIDDEN_DIM, MAX_PARAMS_BILLIONS, MAX_SEQ_LEN, JobSpec, ModelShape
from paralleljob.core.lifecycle import Phase
from paralleljob.core.rankorder import DEFAULT_RANK_ORDER, RankOrder
from paralleljob.k8s.edge.constants import DEFAULT_QUEUE, object_key
from paralleljob.k8s.edge.parse.migdevices import PROFILE_PATTERN
from paralleljob.k8s.edge.parse.template import InvalidTemplate, PodConstraints, parse_constraints
from paralleljob.k8s.edge.status.jobstatus import JobStatus, parse_status
from paralleljob.k8s.edge.status.records import MalformedRecord, PlacementRecord, record_from_status

COST_MODELS = ("seed", "megatron")
NO_STRINGS: Mapping[str, str] = MappingProxyType({})  # a job's labels or annotations when it has none

T = TypeVar("T")
MAX_SHARED_PARTS = 4096
_parts: dict[Any, Any] = {}


def shared(value: T) -> T:
    """An equal value parsed before for another job, when one is kept, else ``value`` (then kept). Thousands
    of jobs made from one manifest have the same model, checkpoint and failure policies and template
    constraints: one frozen copy each saves ~300 bytes a job. Only frozen values are passed (never
    mutated); equal means equal field by field, and of the same type. Forgotten all at once when full."""
    try:
        kept = _parts.get(value)
    except TypeError:  # a value holding something unhashable: not shared
        return value
    if kept is not None and type(kept) is type(value):
        return kept
    if len(_parts) >= MAX_SHARED_PARTS:
        _parts.clear()
    _parts[value] = value
    return value


@dataclass(frozen=True, slots=True)
class CheckpointSpec:
    interval_seconds: int | None = None
    cost_seconds: float | None = None
    failures_per_1000_node_days: float | None = None


@dataclass(frozen=True, slots=True)
class JobRequest:
    spec: JobSpec
    cost_model: str
    gpu_product: str
    queue: str
    priority: int
    failure: FailurePolicy
    checkpoint: CheckpointSpec
    template: Mapping[str, Any]
    expected_runtime_s: float | None = None  # spec.expectedRuntimeSeconds: lets backfill use the gap
    preemptible: bool = True  # spec.preemptible: false keeps the job from ever being preempted
    rank_order: RankOrder = DEFAULT_RANK_ORDER  # spec.rankOrder: how (replica, stage) become node ranks
    constraints: PodConstraints = field(default_factory=PodConstraints)  # what the pod template asks of a node
    pod_group: str = ""  # spec.podGroup: adopt the pods of this group instead of creating any (pod-groups.md)
    # a pod group whose pods each take a whole tray (this many GPUs, fewer than TP): placed on NVLink trays
    tray_pod_gpus: int = 0
    # spec.parallelism.minData..maxData: an elastic job (``spec.dp`` is then ``data``, the size wanted now)
    elastic: ElasticRange | None = None
    # spec.gpuSharing.migProfile: each rank (tp 1) on one MIG slice of this profile instead of a whole GPU
    mig_profile: str = ""
    # spec.gpuSharing.mps.percent: each rank (tp 1) an MPS client of one GPU with this share (0: not MPS)
    mps_percent: int = 0

    def describe(self) -> str:
        """The job's shape as its messages say it; a job on MIG slices or MPS shares says its ranks are slices
        or shares, not GPUs."""
        if not self.mig_profile and not self.mps_percent:
            return self.spec.describe()
        ranks = self.spec.pp * self.spec.dp
        what = f"MIG {self.mig_profile}" if self.mig_profile else f"MPS {self.mps_percent}%"
        return f"TP1xPP{self.spec.pp}xDP{self.spec.dp} ({ranks} x {what})"


@dataclass(frozen=True, slots=True)
class JobObject:
    namespace: str
    name: str
    uid: str
    generation: int
    resource_version: str
    created: str
    deleting: bool
    request: JobRequest | None
    invalid: str  # why ``request`` is None
    status: JobStatus
    phase: Phase
    record: PlacementRecord | None
    record_error: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    invalid_reason: str = "InvalidSpec"  # the condition reason for ``invalid`` (InvalidTemplate for the pods)
    owners: tuple[tuple[str, str, str], ...] = ()  # its ownerReferences as (kind, name, uid)
    # spec.ttlSecondsAfterFinished: delete the job this long after it finished (None: keep it). Read apart
    # from ``request``, so a job that failed as invalid is cleaned up all the same (plan/ttl.py).
    ttl_after_finished: int | None = None
    # namespace/name, made once: a pass with thousands of waiting jobs reads it several times per job
    key: str = field(init=False, repr=False, compare=False)
    # (request, its place in line) once worked out (plan/admission/fifo_admission.line_position): a flood's undecided
    # arrivals are placed in line on every pass, and parsing their times was a tenth of a 50,000-job pass
    line_cache: tuple[object, Any] | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        key = object_key(self.namespace, self.name)
        if self.request is not None and self.request.spec.job_id == key:
            key = self.request.spec.job_id  # one string for both: ~70 bytes a job with 50,000 kept
        object.__setattr__(self, "key", key)

    @property
    def restarts(self) -> int:
        return self.status.restarts

    @property
    def placement_epoch(self) -> int:
        """How many placements the job has had (``JobStatus.placement_epoch``); the next placement
        (admission, repair, migration) is this plus one."""
        return self.status.placement_epoch

    @property
    def queued_at(self) -> str:
        return self.status.queued_at or self.created

    @property
    def ever_ran(self) -> bool:
        return self.status.ever_ran


def _int(data: Mapping[str, Any], key: str, default: int | None) -> int | None:
    value = data.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise InvalidRequest(f"{key} must be an integer, got {value!r}")
    return int(value)


def _num(data: Mapping[str, Any], key: str, default: float | None) -> float | None:
    value = data.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(f"{key} must be a number, got {value!r}")
    return float(value)


# The CRD's CEL messages for the model's bounds, word for word (a test compares them with crds/), so that an
# operator running against an older CRD refuses the same values with the same words.
MODEL_BOUNDS: dict[str, tuple[float, str]] = {
    "hiddenDim": (
        MAX_HIDDEN_DIM,
        f"model.hiddenDim must be between 1 and {MAX_HIDDEN_DIM} (the widest published models use 16384-25600)",
    ),
    "seqLen": (
        MAX_SEQ_LEN,
        f"model.seqLen must be between 1 and {MAX_SEQ_LEN} tokens (the longest published contexts are 1-10 million)",
    ),
    "paramsBillions": (
        MAX_PARAMS_BILLIONS,
        f"model.paramsBillions must be above 0 and at most {MAX_PARAMS_BILLIONS:g} (20 trillion parameters;"
        " the largest published models have about 2 trillion)",
    ),
}


def _check_model_bounds(model: Mapping[str, Any]) -> None:
    for key, (limit, message) in MODEL_BOUNDS.items():
        value = model.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool) and not 0 < value <= limit:
            raise InvalidRequest(message)


def parse_request(key: str, spec: Mapping[str, Any]) -> JobRequest:
    """The job request in ``spec``; :class:`InvalidRequest` naming the field to fix."""
    if not isinstance(spec, Mapping):
        raise InvalidRequest("spec must be an object")
    par = spec.get("parallelism")
    if not isinstance(par, Mapping):
        raise InvalidRequest("spec.parallelism {tensor, pipeline, data} is required")
    model_data = spec.get("model") or {}
    if not isinstance(model_data, Mapping):
        raise InvalidRequest("spec.model must be an object")
    _check_model_bounds(model_data)
    model = shared(
        ModelShape(
            hidden_dim=_int(model_data, "hiddenDim", 4096) or 0,
            seq_len=_int(model_data, "seqLen", 2048) or 0,
            micro_batch_size=_int(model_data, "microBatchSize", 1) or 0,
            num_params_billions=_num(model_data, "paramsBillions", 70.0) or 0.0,
            dtype_bytes=_int(model_data, "dtypeBytes", 2) or 0,
            num_layers=_int(model_data, "layers", None),
            global_batch_size=_int(model_data, "globalBatchSize", None),
        )
    )
    job = JobSpec(
        job_id=key,
        tp=_int(par, "tensor", None) or 0,
        pp=_int(par, "pipeline", None) or 0,
        dp=_int(par, "data", None) or 0,
        memory_per_gpu_gb=_num(spec, "gpuMemoryGiB", 0.0) or 0.0,
        model=model,
        priority=_int(spec, "priority", 0) or 0,
    )
    elastic = _elastic_range(par, job.dp)
    cost = str(spec.get("costModel", "seed"))
    if cost not in COST_MODELS:
        raise InvalidRequest(f"spec.costModel must be one of {', '.join(COST_MODELS)}, got {cost!r}")
    policy = shared(_failure_policy(spec.get("failurePolicy") or {}))
    ck = spec.get("checkpoint") or {}
    checkpoint = shared(
        CheckpointSpec(
            _int(ck, "intervalSeconds", None), _num(ck, "costSeconds", None), _num(ck, "failuresPer1000NodeDays", None)
        )
    )
    pod_group = spec.get("podGroup") or ""
    template = spec.get("template")
    if pod_group:
        if elastic is not None:
            raise InvalidRequest(
                "a pod group is sized by its controller: spec.podGroup cannot be elastic (parallelism.minData/maxData)"
            )
        if not isinstance(pod_group, str) or pod_group != key.partition("/")[2]:
            raise InvalidRequest(f"spec.podGroup must equal metadata.name, got {pod_group!r}")
        if template is not None:
            raise InvalidRequest("spec.podGroup adopts pods another controller creates: leave spec.template out")
        template, constraints = {}, PodConstraints()
    else:
        if not isinstance(template, Mapping) or not isinstance(template.get("spec"), Mapping):
            raise InvalidRequest("spec.template with a pod spec is required")
        containers = template["spec"].get("containers")
        if not isinstance(containers, list) or not containers or not all(isinstance(c, Mapping) for c in containers):
            raise InvalidRequest("spec.template.spec.containers needs at least one container")
        _check_containers(containers)
        constraints = shared(parse_constraints(template["spec"], job.tp))
    runtime = _num(spec, "expectedRuntimeSeconds", None)
    if runtime is not None and runtime <= 0:
        raise InvalidRequest("spec.expectedRuntimeSeconds must be above 0")
    try:
        rank_order = RankOrder.parse(str(spec.get("rankOrder") or DEFAULT_RANK_ORDER.value))
    except ValueError as exc:
        raise InvalidRequest(f"spec.rankOrder: {exc}") from None
    parse_ttl(spec, strict=True)  # refused here only with a CRD older than the field's bounds
    preemptible = spec.get("preemptible", True)
    if not isinstance(preemptible, bool):
        raise InvalidRequest(f"spec.preemptible must be true or false, got {preemptible!r}")
    if pod_group:
        preemptible = False  # preempting a group would mean deleting pods the operator does not own
    mig_profile, mps_percent = _gpu_sharing(spec.get("gpuSharing"), job.tp, bool(pod_group) or elastic is not None)
    return JobRequest(
        spec=job,
        cost_model=cost,
        gpu_product=str(spec.get("gpuProduct") or ""),
        queue=str(spec.get("queue") or DEFAULT_QUEUE),
        priority=job.priority,
        failure=policy,
        checkpoint=checkpoint,
        template=template,
        expected_runtime_s=runtime,
        preemptible=preemptible,
        rank_order=rank_order,
        constraints=constraints,
        pod_group=pod_group,
        elastic=elastic,
        mig_profile=mig_profile,
        mps_percent=mps_percent,
    )


# The CRD's CEL messages for spec.gpuSharing, word for word (a test compares them with crds/).
SHARING_MESSAGES = {
    "profile": "gpuSharing.migProfile must be a MIG profile name such as 1g.10gb, 2g.20gb, 3g.40gb"
    " (<compute slices 1-7>g.<memory>gb)",
    "tensor": "gpuSharing gives each rank one MIG slice or MPS share of one GPU: only for jobs of one GPU per rank"
    " (parallelism.tensor 1)",
    "sized": "gpuSharing is for ParallelJobs that make their own pods at one size: not with spec.podGroup or"
    " parallelism.minData/maxData",
    "one": "gpuSharing takes exactly one of migProfile (a MIG slice per rank) and mps (an MPS share per rank)",
    "percent": "gpuSharing.mps.percent must be a whole number from 1 to 100 (each rank's share of one GPU's"
    " compute and memory)",
}


def _gpu_sharing(data: object, tp: int, not_rigid: bool) -> tuple[str, int]:
    """(``spec.gpuSharing.migProfile``, ``spec.gpuSharing.mps.percent``): ("", 0) when the job takes whole
    GPUs, one of them set otherwise; checked as the CRD checks it."""
    if data is None:
        return "", 0
    sharing = data if isinstance(data, Mapping) else {}
    if ("migProfile" in sharing) == ("mps" in sharing):
        raise InvalidRequest(SHARING_MESSAGES["one"])
    profile, percent = sharing.get("migProfile"), 0
    if "mps" in sharing:
        mps = sharing["mps"]
        asked = mps.get("percent") if isinstance(mps, Mapping) else None
        if not isinstance(asked, int) or isinstance(asked, bool) or not 1 <= asked <= 100:
            raise InvalidRequest(SHARING_MESSAGES["percent"])
        percent = asked
    elif not isinstance(profile, str) or not re.match(PROFILE_PATTERN, profile):
        raise InvalidRequest(SHARING_MESSAGES["profile"])
    if tp != 1:
        raise InvalidRequest(SHARING_MESSAGES["tensor"])
    if not_rigid:
        raise InvalidRequest(SHARING_MESSAGES["sized"])
    return (profile if isinstance(profile, str) else ""), percent


def parse_ttl(spec: object, strict: bool = False) -> int | None:
    """``spec.ttlSecondsAfterFinished``: an integer >= 0, or None when absent. A wrong value raises
    :class:`InvalidRequest` when ``strict``, and reads as None (never deleted) otherwise."""
    value = spec.get("ttlSecondsAfterFinished") if isinstance(spec, Mapping) else None
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if strict:
        raise InvalidRequest(f"spec.ttlSecondsAfterFinished must be an integer >= 0, got {value!r}")
    return None


def _elastic_range(par: Mapping[str, Any], data: int) -> ElasticRange | None:
    """``minData``/``maxData`` as a frozen range (both or neither, as the CRD's CEL rules say)."""
    low, high = _int(par, "minData", None), _int(par, "maxData", None)
    if low is None and high is None:
        return None
    if low is None or high is None:
        raise InvalidRequest("give both parallelism.minData and parallelism.maxData (an elastic job), or neither")
    return ElasticRange(low, high, data)


def _check_containers(containers: list[Mapping[str, Any]]) -> None:
    """The parts of a container the operator fills in must have the shape a Pod needs (the CRD keeps the
    rest of the template free-form, so the API server only checks it when the pods are created)."""
    for i, container in enumerate(containers):
        where = f"spec.template.spec.containers[{i}]"
        env = container.get("env")
        if env is not None and (not isinstance(env, list) or not all(isinstance(e, Mapping) for e in env)):
            raise InvalidRequest(f"{where}.env must be a list of {{name, value}} objects")
        resources = container.get("resources")
        if resources is None:
            continue
        if not isinstance(resources, Mapping):
            raise InvalidRequest(f"{where}.resources must be an object")
        for section in ("limits", "requests"):
            if resources.get(section) is not None and not isinstance(resources.get(section), Mapping):
                raise InvalidRequest(f"{where}.resources.{section} must be an object")


def parse_job(body: Mapping[str, Any]) -> JobObject:
    metadata = body.get("metadata") or {}
    raw_status = body.get("status") or {}
    namespace, name = str(metadata.get("namespace", "")), str(metadata.get("name", ""))
    key = object_key(namespace, name)
    request: JobRequest | None = None
    invalid, invalid_reason = "", "InvalidSpec"
    try:
        request = parse_request(key, body.get("spec") or {})
    except InvalidRequest as exc:
        invalid = str(exc)
        if isinstance(exc, InvalidTemplate):
            invalid_reason = "InvalidTemplate"
    record, record_error = None, ""
    try:
        record = record_from_status(raw_status) if isinstance(raw_status, Mapping) else None
    except MalformedRecord as exc:
        record_error = str(exc)
    generation = metadata.get("generation", 0)
    status = parse_status(raw_status, record.epoch if record is not None else None)
    return JobObject(
        namespace=namespace,
        name=name,
        uid=str(metadata.get("uid", "")),
        generation=generation if isinstance(generation, int) else 0,
        resource_version=str(metadata.get("resourceVersion", "")),
        created=str(metadata.get("creationTimestamp", "")),
        deleting=bool(metadata.get("deletionTimestamp")),
        request=request,
        invalid=invalid,
        status=status,
        phase=status.phase,
        record=record,
        record_error=record_error,
        labels=metadata.get("labels") or NO_STRINGS,
        annotations=metadata.get("annotations") or NO_STRINGS,
        invalid_reason=invalid_reason,
        owners=_owners(metadata.get("ownerReferences")),
        ttl_after_finished=parse_ttl(body.get("spec")),
    )


def _owners(refs: object) -> tuple[tuple[str, str, str], ...]:
    if not isinstance(refs, list):
        return ()
    return tuple(
        (str(ref.get("kind", "")), str(ref.get("name", "")), str(ref.get("uid", "")))
        for ref in refs
        if isinstance(ref, Mapping)
    )


def _failure_policy(data: Mapping[str, Any]) -> FailurePolicy:
    """``spec.failurePolicy``; a field left out takes :class:`FailurePolicy`'s default (the only copy)."""
    default = DEFAULT_FAILURE_POLICY
    on_unplaceable = str(data.get("onUnplaceable", default.on_unplaceable))
    if on_unplaceable not in set(OnUnplaceable):
        raise InvalidRequest(f"spec.failurePolicy.onUnplaceable must be Requeue or Fail, got {on_unplaceable!r}")
    max_restarts = _int(data, "maxRestarts", default.max_restarts)
    if max_restarts is None or max_restarts < 0:
        raise InvalidRequest("spec.failurePolicy.maxRestarts must be >= 0")
    reoptimize = str(data.get("reoptimize", default.reoptimize))
    if reoptimize not in set(ReoptimizePolicy):
        raise InvalidRequest(
            f"spec.failurePolicy.reoptimize must be Propose or MigrateAtCheckpoint, got {reoptimize!r}"
        )
    strategy = RecoveryStrategy.parse(str(data.get("strategy", default.strategy.value)))
    return FailurePolicy(strategy, max_restarts, OnUnplaceable(on_unplaceable), ReoptimizePolicy(reoptimize))
