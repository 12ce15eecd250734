"""Reads of Nodes by name only: counting and picking nodes of a 10,000-node fleet without moving full objects."""

from __future__ import annotations

import json
from typing import Any

from kubernetes.client.exceptions import ApiException

from .kube import REQUEST_TIMEOUT_SECONDS, as_dict

# Asks for PartialObjectMetadataList: names and labels only, a few hundred bytes a node instead of the full objects.
METADATA_ONLY = {"Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"}


def list_node_names(core: Any, label_selector: str, limit: int | None = None) -> list[str]:
    """Names of the nodes ``label_selector`` selects (the first ``limit`` by name, when given), read as metadata
    only: counting a 10,000-node fleet must not move its full Node objects."""
    kwargs: dict[str, Any] = {"label_selector": label_selector, "_request_timeout": REQUEST_TIMEOUT_SECONDS,
                              "_headers": dict(METADATA_ONLY), "_preload_content": False}
    if limit is not None:
        kwargs["limit"] = limit
    names: list[str] = []
    while True:
        response = core.list_node(**kwargs)
        body = json.loads(response.data) if hasattr(response, "data") else as_dict(core, response)
        names += [((item.get("metadata") or {}).get("name") or "") for item in body.get("items") or []]
        token = (body.get("metadata") or {}).get("continue")
        if not token or limit is not None:
            return [n for n in names if n]
        kwargs["_continue"] = token


def node_exists(core: Any, name: str) -> bool:
    try:
        core.read_node(name, _request_timeout=REQUEST_TIMEOUT_SECONDS)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


