"""Reading ResourceClaims and ResourceSlices for the command line and the web view: an empty list, not an
error, where the cluster has no ``resource.k8s.io/v1`` or the reader no grant (the map and the job panel
then show device-plugin nodes only, as the operator would)."""

from __future__ import annotations

from typing import Any

from paralleljob.k8s.runtime.api import ApiError, Kube, retrying

DRA_SLICES = "/apis/resource.k8s.io/v1/resourceslices"
DRA_CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"


async def dra_list(kube: Kube, path: str, params: dict[str, str] | None = None) -> list[dict[str, Any]]:
    try:
        items, _ = await retrying(lambda: kube.list(path, params))
    except ApiError as exc:
        if exc.status in (403, 404):
            return []
        raise
    return list(items)
