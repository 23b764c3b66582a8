"""The worker pod template, read at the edge: what it asks of a node, and the fields the operator owns.

Asks of a node (honoured when placing, see ``eligibility.py``): ``nodeSelector``, required node affinity,
tolerations, and the pod's effective requests by Kubernetes' rule — the sum over containers and restartable
(sidecar) init containers, at least the largest init container plus the sidecars started before it, plus
``overhead`` — with a request defaulting to its limit as the API server does.

Owned by the operator (refused with a reason, never rewritten silently): ``nodeName`` (the operator binds),
a ``schedulerName`` other than ours (no other scheduler places these pods), a ``restartPolicy`` other than
``Never`` (a crashed rank is the operator's to restart, with its gang), and the GPUs: only the first
container gets ``nvidia.com/gpu``, exactly ``parallelism.tensor`` of them. The CRD's CEL rules refuse the
same with the same words; these checks hold when the installed CRD is older than the operator.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from paralleljob.core.errors import InvalidRequest
from paralleljob.k8s.edge.constants import GPU_RESOURCE, SCHEDULER_NAME
from paralleljob.k8s.edge.parse.matching import Requirement, Term, Toleration, requirement_error
from paralleljob.k8s.edge.parse.quantity import parse_count, parse_resources

TOLERATION_OPERATORS = ("", "Equal", "Exists")
EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")
WHERE = "spec.template.spec"


class InvalidTemplate(InvalidRequest):
    """The pod template asks for something the operator owns, or is not a valid pod spec."""


@dataclass(frozen=True, slots=True)
class PodConstraints:
    node_selector: tuple[tuple[str, str], ...] = ()
    affinity: tuple[Term, ...] | None = None  # required node affinity terms; None: none given
    tolerations: tuple[Toleration, ...] = ()
    requests: tuple[tuple[str, int], ...] = ()  # per pod, scheduler units, GPUs left out
    # A PodGroup's schedulingConstraints.topology key: every pod inside one domain of that node label.
    topology_key: str = ""

    @property
    def selector(self) -> dict[str, str]:
        return dict(self.node_selector)


def _mapping(value: object, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidTemplate(f"{where} must be an object")
    return value


def _list(value: object, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, Mapping) for item in value):
        raise InvalidTemplate(f"{where} must be a list of objects")
    return value


def _strings(value: object, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidTemplate(f"{where} must be a list of strings")
    return tuple(value)


def _requirements(items: object, where: str, for_fields: bool) -> tuple[Requirement, ...]:
    out = []
    for i, item in enumerate(_list(items, where)):
        req = Requirement(
            str(item.get("key") or ""), str(item.get("operator") or ""), _strings(item.get("values"), f"{where}[{i}]")
        )
        error = requirement_error(req, for_fields)
        if error:
            raise InvalidTemplate(f"{where}[{i}]: {error}")
        out.append(req)
    return tuple(out)


def node_selector_terms(selector: Mapping[str, Any], where: str) -> tuple[Term, ...]:
    """A core/v1 NodeSelector's terms (any one must hold), e.g. a ResourceClaim allocation's nodeSelector."""
    terms = _list(selector.get("nodeSelectorTerms"), f"{where}.nodeSelectorTerms")
    return tuple(
        Term(
            _requirements(term.get("matchExpressions"), f"{where}.nodeSelectorTerms[{i}].matchExpressions", False),
            _requirements(term.get("matchFields"), f"{where}.nodeSelectorTerms[{i}].matchFields", True),
        )
        for i, term in enumerate(terms)
    )


def _affinity(spec: Mapping[str, Any]) -> tuple[Term, ...] | None:
    node_affinity = _mapping(_mapping(spec.get("affinity"), f"{WHERE}.affinity").get("nodeAffinity"), "nodeAffinity")
    where = f"{WHERE}.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return None
    return node_selector_terms(_mapping(required, where), where)


def _tolerations(spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    out = []
    for i, item in enumerate(_list(spec.get("tolerations"), f"{WHERE}.tolerations")):
        where = f"{WHERE}.tolerations[{i}]"
        tol = Toleration(
            str(item.get("key") or ""),
            str(item.get("operator") or "Equal"),
            str(item.get("value") or ""),
            str(item.get("effect") or ""),
        )
        if tol.operator not in TOLERATION_OPERATORS:
            raise InvalidTemplate(f"{where}.operator must be Equal or Exists, got {tol.operator!r}")
        if tol.effect not in EFFECTS:
            raise InvalidTemplate(f"{where}.effect must be NoSchedule, PreferNoSchedule or NoExecute")
        if not tol.key and tol.operator != "Exists":
            raise InvalidTemplate(f"{where}: a toleration without a key needs operator Exists")
        if tol.operator == "Exists" and tol.value:
            raise InvalidTemplate(f"{where}: operator Exists takes no value")
        out.append(tol)
    return tuple(out)


def _container_requests(container: Mapping[str, Any], where: str) -> dict[str, int]:
    resources = _mapping(container.get("resources"), f"{where}.resources")
    parsed: dict[str, dict[str, int]] = {}
    for section in ("limits", "requests"):
        values, bad = parse_resources(_mapping(resources.get(section), f"{where}.resources.{section}"))
        if bad:
            raise InvalidTemplate(f"{where}.resources.{section}: {'; '.join(bad)}")
        parsed[section] = values
    return {**parsed["limits"], **parsed["requests"]}  # a request defaults to its limit


def _add(total: dict[str, int], extra: Mapping[str, int]) -> None:
    for name, amount in extra.items():
        total[name] = total.get(name, 0) + amount


def _max(total: dict[str, int], other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        total[name] = max(total.get(name, 0), amount)


def effective_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """What the scheduler reserves for the pod (Kubernetes' rule, sidecars included), in scheduler units."""
    total: dict[str, int] = {}
    for i, container in enumerate(_list(spec.get("containers"), f"{WHERE}.containers")):
        _add(total, _container_requests(container, f"{WHERE}.containers[{i}]"))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for i, container in enumerate(_list(spec.get("initContainers"), f"{WHERE}.initContainers")):
        requests = _container_requests(container, f"{WHERE}.initContainers[{i}]")
        if container.get("restartPolicy") == "Always":
            _add(total, requests)
            _add(sidecars, requests)
            _max(init_peak, sidecars)
        else:
            running = dict(requests)
            _add(running, sidecars)
            _max(init_peak, running)
    _max(total, init_peak)
    overhead, bad = parse_resources(_mapping(spec.get("overhead"), f"{WHERE}.overhead"))
    if bad:
        raise InvalidTemplate(f"{WHERE}.overhead: {'; '.join(bad)}")
    _add(total, overhead)
    return {name: amount for name, amount in total.items() if amount > 0}


def check_owned_fields(spec: Mapping[str, Any], tp: int) -> None:
    """Refuse what the operator sets itself, with what to do instead."""
    if spec.get("nodeName"):
        raise InvalidTemplate(
            f"{WHERE}.nodeName is set: the operator binds every worker to the GPUs it places it on;"
            " remove nodeName (use nodeSelector or node affinity to choose nodes)"
        )
    scheduler = spec.get("schedulerName")
    if scheduler not in (None, "", SCHEDULER_NAME):
        raise InvalidTemplate(
            f"{WHERE}.schedulerName must be {SCHEDULER_NAME} (or unset), got {scheduler!r}: the operator binds"
            " every worker itself, so no other scheduler would place these pods"
        )
    policy = spec.get("restartPolicy")
    if policy not in (None, "", "Never"):
        raise InvalidTemplate(
            f"{WHERE}.restartPolicy must be Never (or unset), got {policy!r}: a crashed rank is restarted by"
            " the operator together with its gang, not by the kubelet"
        )
    containers = _list(spec.get("containers"), f"{WHERE}.containers")
    init = _list(spec.get("initContainers"), f"{WHERE}.initContainers")
    for kind, items in (("containers", containers), ("initContainers", init)):
        for i, container in enumerate(items):
            resources = _mapping(container.get("resources"), f"{WHERE}.{kind}[{i}].resources")
            for section in ("limits", "requests"):
                values = _mapping(resources.get(section), f"{WHERE}.{kind}[{i}].resources.{section}")
                if GPU_RESOURCE not in values:
                    continue
                where = f"{WHERE}.{kind}[{i}].resources.{section}[{GPU_RESOURCE}]"
                if kind != "containers" or i != 0:
                    raise InvalidTemplate(
                        f"{where} is set: only the first container gets GPUs (the operator gives it the TP"
                        f" group's {tp}); remove the GPU request from this container"
                    )
                if parse_count(values[GPU_RESOURCE]) != tp:
                    raise InvalidTemplate(
                        f"{where} is {values[GPU_RESOURCE]!r}, but each worker gets exactly parallelism.tensor"
                        f" = {tp} GPUs; remove it (the operator sets it) or set it to {tp}"
                    )


def parse_constraints(spec: Mapping[str, Any], tp: int) -> PodConstraints:
    """The template's node constraints and requests; :class:`InvalidTemplate` naming the field to fix."""
    check_owned_fields(spec, tp)
    selector = _mapping(spec.get("nodeSelector"), f"{WHERE}.nodeSelector")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in selector.items()):
        raise InvalidTemplate(f"{WHERE}.nodeSelector must map label keys to string values")
    requests = effective_requests(spec)
    requests.pop(GPU_RESOURCE, None)  # placed by the operator, GPU by GPU
    return PodConstraints(
        node_selector=tuple(sorted(selector.items())),
        affinity=_affinity(spec),
        tolerations=_tolerations(spec),
        requests=tuple(sorted(requests.items())),
    )

