"""Kubernetes' own rules for which nodes a pod may land on: node selectors, required node affinity, taints
and tolerations. Pure functions over parsed values, written from the rules of kube-scheduler's NodeAffinity
and TaintToleration filters (``k8s.io/component-helpers/scheduling/corev1/nodeaffinity``,
``k8s.io/api/core/v1`` ``Toleration.ToleratesTaint``, ``k8s.io/apimachinery`` label requirements):

- ``nodeSelector``: every pair must equal the node's label;
- required node affinity: the terms are ORed, a term's expressions and fields are ANDed; an empty term
  matches nothing; ``In`` needs the label with one of the values, ``NotIn`` matches when the label is absent
  or has none of them, ``Exists``/``DoesNotExist`` test presence, ``Gt``/``Lt`` need the label and both
  numbers to parse as 64-bit integers; ``matchFields`` sees only ``metadata.name`` (``In``/``NotIn`` with one
  value; another key reads as the empty string);
- a toleration with an effect only matches taints of that effect (empty: every effect); with a key only that
  key (empty key with ``Exists``: every taint); ``Equal`` (or empty) compares values, ``Exists`` does not;
  only ``NoSchedule`` and ``NoExecute`` taints keep a pod away, ``PreferNoSchedule`` is a preference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

LABEL_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
FIELD_OPERATORS = ("In", "NotIn")
FILTER_EFFECTS = ("NoSchedule", "NoExecute")
INT64 = (-(2**63), 2**63 - 1)


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Term:
    """One nodeSelectorTerm: every label expression and every field expression must hold."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.expressions and not self.fields


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""


def _int64(text: str) -> int | None:
    body = text[1:] if text[:1] in "+-" else text
    if not body.isascii() or not body.isdigit():
        return None
    value = int(text)
    return value if INT64[0] <= value <= INT64[1] else None


def requirement_error(req: Requirement, for_fields: bool = False) -> str:
    """Why the API server would refuse this requirement (empty when it is valid)."""
    if for_fields:
        if req.operator not in FIELD_OPERATORS:
            return f"matchFields operator {req.operator!r} is not one of In, NotIn"
        if len(req.values) != 1:
            return f"matchFields {req.key} {req.operator} needs exactly one value"
        return ""
    if not req.key:
        return "a matchExpressions key must not be empty"
    if req.operator not in LABEL_OPERATORS:
        return f"operator {req.operator!r} is not one of {', '.join(LABEL_OPERATORS)}"
    if req.operator in ("In", "NotIn") and not req.values:
        return f"{req.key} {req.operator} needs at least one value"
    if req.operator in ("Exists", "DoesNotExist") and req.values:
        return f"{req.key} {req.operator} takes no values"
    if req.operator in ("Gt", "Lt") and (len(req.values) != 1 or _int64(req.values[0]) is None):
        return f"{req.key} {req.operator} needs exactly one integer value"
    return ""


def label_matches(req: Requirement, labels: Mapping[str, str]) -> bool:
    value = labels.get(req.key)
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt"):
        have = _int64(value) if value is not None else None
        want = _int64(req.values[0]) if len(req.values) == 1 else None
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want
    return False


def field_matches(req: Requirement, node_name: str) -> bool:
    value = node_name if req.key == "metadata.name" else ""
    if len(req.values) != 1:
        return False
    if req.operator == "In":
        return value == req.values[0]
    if req.operator == "NotIn":
        return value != req.values[0]
    return False


def term_matches(term: Term, labels: Mapping[str, str], node_name: str) -> bool:
    if term.empty:
        return False
    return all(label_matches(r, labels) for r in term.expressions) and all(
        field_matches(r, node_name) for r in term.fields
    )


def affinity_matches(terms: Sequence[Term] | None, labels: Mapping[str, str], node_name: str) -> bool:
    """Required node affinity; None means the pod has none (every node matches)."""
    if terms is None:
        return True
    return any(term_matches(term, labels, node_name) for term in terms)


def selector_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator in ("", "Equal"):
        return toleration.value == taint.value
    # Exists tolerates any value; the alpha Gt/Lt operators are behind a feature gate that is off by default
    return toleration.operator == "Exists"


def untolerated(taints: Sequence[Taint], tolerations: Sequence[Toleration]) -> Taint | None:
    """The first NoSchedule/NoExecute taint no toleration matches (None: the pod may land here)."""
    for taint in taints:
        if taint.effect in FILTER_EFFECTS and not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None
