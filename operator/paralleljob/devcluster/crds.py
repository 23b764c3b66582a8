"""Install the project's CustomResourceDefinitions (``crds/*.yaml``) and wait until they are Established,
so that the first ``kubectl apply`` of a ParallelJob right after ``up`` does not race the API server.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from paralleljob.devcluster.versions import repo_root

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient


def crd_documents(directory: Path | None = None) -> list[dict[str, Any]]:
    directory = directory or repo_root() / "crds"
    documents: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.yaml")) if directory.is_dir() else []:
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition":
                documents.append(document)
    return documents


async def install_crds(api: ApiClient, directory: Path | None = None, timeout_s: float = 30.0) -> list[str]:
    """Create or replace every CRD found, then wait for all of them; returns their names."""
    return await install_documents(api, crd_documents(directory), timeout_s)


async def install_documents(api: ApiClient, documents: list[dict[str, Any]], timeout_s: float = 30.0) -> list[str]:
    """Create or replace these CRDs, then wait for all of them; returns their names."""
    from kubernetes_asyncio.client import ApiextensionsV1Api
    from kubernetes_asyncio.client.exceptions import ApiException

    # Typed as Any: the client accepts plain dict bodies although its annotations name only model classes.
    extensions: Any = ApiextensionsV1Api(api)
    names = []
    for document in documents:
        name = document["metadata"]["name"]
        try:
            await extensions.create_custom_resource_definition(document)
        except ApiException as exc:
            if exc.status != 409:
                raise
            current = await extensions.read_custom_resource_definition(name)
            document["metadata"]["resourceVersion"] = current.metadata.resource_version
            await extensions.replace_custom_resource_definition(name, document)
        names.append(name)
    deadline = time.monotonic() + timeout_s
    for name in names:
        while not await _established(extensions, name):
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {timeout_s:.0f} s")
            await asyncio.sleep(0.1)
    return names


async def _established(extensions: Any, name: str) -> bool:
    crd = await extensions.read_custom_resource_definition(name)
    conditions = (crd.status.conditions or []) if crd.status else []
    return any(c.type == "Established" and c.status == "True" for c in conditions)
