"""The client's JSON on the wire (``runtime/wire.py``) and what ``Kube.request`` sends through it: bodies,
content types, queries and answers as a real HTTP server sees them."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import web

from paralleljob.k8s.runtime import wire
from paralleljob.k8s.runtime.api import ApiError
from tests.k8s.localserver import serve


def test_what_is_encoded_decodes_to_the_same_value() -> None:
    body = {"metadata": {"name": "w-0", "labels": {"é": "ü"}}, "spec": {"n": 2**62, "f": 0.5, "l": [None, True]}}
    assert wire.decode(wire.encode(body)) == body
    assert json.loads(wire.encode(body)) == body  # what any JSON reader reads
    assert wire.encode({1: "a"}) == b'{"1":"a"}'  # integer keys as the standard library writes them


def test_a_body_orjson_refuses_is_written_by_the_standard_library() -> None:
    assert json.loads(wire.encode({"n": 2**70})) == {"n": 2**70}


def test_what_is_not_json_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        wire.decode(b"\x00garbage{")


def test_requests_carry_their_body_content_type_and_query_and_answers_come_back_decoded() -> None:
    seen: list[tuple[str, str, str, dict[str, str], Any]] = []

    async def handle(request: web.Request) -> web.Response:
        raw = await request.read()
        seen.append(
            (request.method, request.path, request.content_type, dict(request.query), json.loads(raw) if raw else None)
        )
        if request.path.endswith("/missing"):
            return web.json_response(
                {"kind": "Status", "message": 'pods "missing" not found', "reason": "NotFound"}, status=404
            )
        return web.json_response({"metadata": {"name": "w-0", "uid": "u"}, "echo": json.loads(raw) if raw else None})

    async def scenario() -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        runner, kube = await serve(app)
        try:
            pod = {"metadata": {"name": "w-0", "annotations": {"paralleljob.dev/gpu-indices": "0,1"}}, "spec": {}}
            created = await kube.request("POST", "/api/v1/namespaces/ns/pods", pod)
            assert created["echo"] == pod and created["metadata"]["uid"] == "u"
            await kube.merge_patch("/api/v1/namespaces/ns/pods/w-0", {"metadata": {"labels": {"a": None}}})
            await kube.bind("ns", "w-0", "u", "node-1")
            await kube.request("GET", "/api/v1/pods", query={"labelSelector": "a=b,c in (d)", "limit": "5"})
            await kube.delete("/api/v1/namespaces/ns/pods/w-0", uid="u", grace_seconds=0)
            with pytest.raises(ApiError) as refused:
                await kube.request("GET", "/api/v1/namespaces/ns/pods/missing")
            assert refused.value.status == 404 and refused.value.reason == "NotFound"
            assert 'pods "missing" not found' in str(refused.value)
        finally:
            await kube.close()
            await runner.cleanup()

    asyncio.run(scenario())
    post, patch, bind, get, delete, missing = seen
    assert post[:3] == ("POST", "/api/v1/namespaces/ns/pods", "application/json")
    assert patch[2] == "application/merge-patch+json" and patch[4] == {"metadata": {"labels": {"a": None}}}
    assert bind[1] == "/api/v1/namespaces/ns/pods/w-0/binding" and bind[4]["target"]["name"] == "node-1"
    assert bind[4]["metadata"]["uid"] == "u"
    assert get[0] == "GET" and get[3] == {"labelSelector": "a=b,c in (d)", "limit": "5"} and get[4] is None
    assert delete[0] == "DELETE" and delete[4]["preconditions"] == {"uid": "u"} and delete[4]["gracePeriodSeconds"] == 0
    assert missing[0] == "GET"
