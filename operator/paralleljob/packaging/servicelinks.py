"""The environment variables Kubernetes' service links put into a pod, and whether a name can be one of them.

With ``enableServiceLinks`` on (the pod default), the kubelet gives every container one set of variables per
Service of the pod's namespace, named after the Service upper-cased with ``-`` as ``_``: ``<S>_SERVICE_HOST``,
``<S>_SERVICE_PORT``, ``<S>_SERVICE_PORT_<PORT NAME>``, ``<S>_PORT`` (``tcp://ip:port``) and
``<S>_PORT_<n>_<PROTO>`` with ``_PROTO``, ``_PORT`` and ``_ADDR``. A setting read from a variable of one of
those shapes is at the mercy of whoever names a Service: the chart's own ``paralleljob-metrics`` Service once
set ``PARALLELJOB_METRICS_PORT=tcp://10.96.101.16:8080`` in the operator's pods, which read it as its port
and crash-looped. The tests use this to check that none of our programs reads such a name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

# A Service name is a DNS-1035 label and a port name an IANA service name; upper-cased, both are [A-Z0-9_].
_LINK_SHAPE = re.compile(
    r"^[A-Z][A-Z0-9_]*_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_[0-9]+_(TCP|UDP|SCTP)(_PROTO|_PORT|_ADDR)?)?)$"
)


def variable_prefix(service_name: str) -> str:
    return service_name.upper().replace("-", "_")


def could_be_link_variable(name: str) -> bool:
    """Whether some Service, by its name or a port's, makes the kubelet set a variable called ``name``."""
    return _LINK_SHAPE.match(name) is not None


def link_variables(service: Mapping[str, Any]) -> dict[str, str]:
    """The variables one Service (a body, as rendered or read back) gives every pod of its namespace; none
    for a headless Service (no cluster IP), as the kubelet does. Values use the IP the body has, or a
    stand-in for a rendered Service that has none yet."""
    spec = service.get("spec") or {}
    ip = spec.get("clusterIP") or "10.96.101.16"
    if ip == "None":
        return {}
    prefix = variable_prefix(service["metadata"]["name"])
    out: dict[str, str] = {f"{prefix}_SERVICE_HOST": ip}
    for i, port in enumerate(spec.get("ports") or []):
        number, protocol = str(port["port"]), str(port.get("protocol") or "TCP")
        if i == 0:
            out[f"{prefix}_SERVICE_PORT"] = number
            out[f"{prefix}_PORT"] = f"{protocol.lower()}://{ip}:{number}"
        if port.get("name"):
            out[f"{prefix}_SERVICE_PORT_{variable_prefix(port['name'])}"] = number
        link = f"{prefix}_PORT_{number}_{protocol.upper()}"
        out[link] = f"{protocol.lower()}://{ip}:{number}"
        out[f"{link}_PROTO"] = protocol.lower()
        out[f"{link}_PORT"] = number
        out[f"{link}_ADDR"] = ip
    return out
