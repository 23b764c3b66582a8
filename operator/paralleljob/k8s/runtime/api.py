"""A thin JSON client over kubernetes_asyncio: one ApiClient (its configuration, auth and aiohttp session)
for every call the operator makes.

Calls go out raw on the client's aiohttp session, their bodies written and their answers read by ``wire``,
and come back as dicts: the typed models cost more CPU to build than the whole placement, and the generated
model cannot parse the Status a ``pods/binding`` POST answers with anyway. Errors are :class:`ApiError` with the HTTP
status and the API server's message; :func:`retrying` retries the transient ones (429, 5xx, connection
errors) with exponential backoff and jitter.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

import aiohttp
from kubernetes_asyncio import client
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_random_exponential

from paralleljob.k8s.edge.render.manifests import binding
from paralleljob.k8s.runtime import wire
from paralleljob.k8s.runtime.lanes import Lanes
from paralleljob.shellkit.kubeconfig import load_configuration, unreachable

log = logging.getLogger("paralleljob.k8s")

T = TypeVar("T")
RETRYABLE = frozenset({0, 429, 500, 502, 503, 504})
LIST_PAGE_SIZE = 500  # client-go's reflector pages its lists by 500 too
SSL_CLOSE_S = 0.25  # what aiohttp's docs give an SSL connection to close after its session
REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=30)


class Answer(enum.Enum):
    """What an API error means for the write that got it, one mapping from HTTP status for every caller."""

    GONE = "gone"  # 404: the object is not there (deleted meanwhile)
    CONFLICT = "conflict"  # 409: exists already, changed meanwhile, or a precondition (UID) failed
    TRANSIENT = "transient"  # 0 (no answer), 429, 5xx: try again later
    INVALID = "invalid"  # 400, 422, a Pod Security 403: the object itself is refused; trying again cannot help
    REFUSED = "refused"  # anything else (403 forbidden, 405, ...)


class ApiError(Exception):
    def __init__(self, status: int, message: str, reason: str = "", retry_after: float | None = None) -> None:
        # status 0: no HTTP answer at all; "HTTP 0" would only hide the message that says why
        super().__init__(f"HTTP {status}: {message}" if status else message)
        self.status = status
        self.message = message
        self.reason = reason
        self.retry_after = retry_after  # seconds the server asked us to wait (Retry-After on 429/503)

    @property
    def retryable(self) -> bool:
        return self.status in RETRYABLE

    @property
    def answer(self) -> Answer:
        if self.status == 404:
            return Answer.GONE
        if self.status == 409:
            return Answer.CONFLICT
        if self.retryable:
            return Answer.TRANSIENT
        if self.status in (400, 422) or (self.status == 403 and "violates PodSecurity" in self.message):
            return Answer.INVALID  # the object is wrong, or above its namespace's Pod Security level
        return Answer.REFUSED


class NotLeading(ApiError):
    """A write refused on this side: the instance is not (or can no longer be sure it is) the leader."""

    def __init__(self, method: str, path: str) -> None:
        super().__init__(-1, f"{method} {path} not sent: this instance does not hold the leader lease")


def parse_watch_line(line: bytes, path: str) -> dict[str, Any] | None:
    """One watch event, or None for a line that is not one (a proxy's garbage, a truncated chunk): skipped
    with a warning, because a watch that dies on one bad line leaves the operator blind."""
    try:
        event = wire.decode(line)
    except ValueError:
        log.warning("watch %s: skipped a line that is not JSON: %r", path, line[:120])
        return None
    if not isinstance(event, dict):
        log.warning("watch %s: skipped a line that is not an event: %r", path, line[:120])
        return None
    return event


MAX_RETRY_AFTER_SECONDS = 30.0  # a server asking for longer is told no: the caller's next pass tries again


def _retry_after_or_backoff(fallback: Callable[[RetryCallState], float]) -> Callable[[RetryCallState], float]:
    """Wait as long as the server's Retry-After says (API priority and fairness answers 429 with one),
    else exponentially longer with jitter."""

    def wait(state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, ApiError) and exc.retry_after is not None:
            return min(max(exc.retry_after, 0.0), MAX_RETRY_AFTER_SECONDS)
        return fallback(state)

    return wait


async def retrying(
    call: Callable[[], Awaitable[T]],
    attempts: int = 5,
    first_delay: float = 0.05,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> T:
    """Run ``call``; on a transient error (``ApiError.retryable``) wait and try again, ``attempts`` times in all."""
    async for attempt in AsyncRetrying(
        stop=stop_after_attempt(attempts),
        wait=_retry_after_or_backoff(wait_random_exponential(multiplier=first_delay, max=5.0)),
        retry=retry_if_exception(lambda exc: isinstance(exc, ApiError) and exc.retryable),
        before_sleep=lambda state: log.debug("transient API error (%s); retrying", state.outcome),
        sleep=sleep,
        reraise=True,
    ):
        with attempt:
            return await call()
    raise AssertionError("unreachable: tenacity re-raises the last error")


class Kube:
    def __init__(self, configuration: client.Configuration, concurrency: int = 48) -> None:
        configuration.connection_pool_maxsize = max(concurrency, 4)
        self.configuration = configuration
        self.api = client.ApiClient(configuration)
        self.host = str(configuration.host).rstrip("/")
        if not any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")):
            # kubernetes_asyncio opens its session with trust_env=True, which makes aiohttp look for a
            # ~/.netrc on every request; without proxies there is nothing to trust the environment for.
            self.api.rest_client.pool_manager._trust_env = False
        # The REST layer's own proxy and TLS server name (from the kubeconfig), for calls that go to its
        # session directly: it would write bodies with the standard library's json (wire.py says why not).
        rest = self.api.rest_client
        self._session = rest.pool_manager
        self._transport: dict[str, Any] = {
            key: value
            for key, value in (
                ("proxy", rest.proxy),
                ("proxy_headers", rest.proxy_headers),
                ("server_hostname", rest.server_hostname),
            )
            if value
        }
        self.limit = Lanes(concurrency)  # urgent requests (binds, placements) ahead of background ones
        # Set by the runtime to the leader election's "still leading" test: every write (anything but GET)
        # checks it just before it goes out, so an instance that lost its lease, or was paused past its
        # renew deadline, cannot act on a stale view while another replica leads. The lease's own writes
        # pass ``fenced=False``.
        self.write_fence: Callable[[], bool] | None = None
        # Set by the runtime to count every answer (method, path, HTTP status; 0: none) for /metrics.
        self.observe: Callable[[str, str, int], None] | None = None
        self._auth: dict[str, str] | None = None
        self._auth_at = 0.0

    @classmethod
    async def connect(cls, kubeconfig: str | None = None, concurrency: int = 48) -> Kube:
        return cls(await load_configuration(kubeconfig), concurrency)

    async def close(self) -> None:
        await self.api.close()
        # An SSL transport shuts down asynchronously after aiohttp closes it (aio-libs/aiohttp#1925): a loop that
        # ends at once leaves it unclosed, and its ResourceWarning surfaces wherever it is collected.
        await asyncio.sleep(SSL_CLOSE_S)

    async def _headers(self, content_type: str) -> dict[str, str]:
        # The auth header is looked up once a minute, not per request (a token file or an exec plugin may
        # rotate it; a minute is well inside any token's lifetime).
        now = time.monotonic()
        if self._auth is None or now - self._auth_at > 60:
            auth: dict[str, str] = {}
            await self.api.update_params_for_auth(auth, [], ["BearerToken"])
            self._auth, self._auth_at = auth, now
        return {"Content-Type": content_type, "Accept": "application/json", **self._auth}

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        fenced: bool = True,
        first: bool = False,
    ) -> dict[str, Any]:
        """One API call, in the client's lanes (runtime/lanes.py): ``first`` for a list's pages."""
        headers = await self._headers(content_type)
        async with self.limit.slot(first=first):
            if fenced and method != "GET" and self.write_fence is not None and not self.write_fence():
                raise NotLeading(method, path)
            try:
                response = await self._session.request(
                    method,
                    self.host + path + (f"?{urlencode(query)}" if query else ""),
                    headers=headers,
                    data=None if body is None else wire.encode(body),
                    timeout=REQUEST_TIMEOUT,
                    **self._transport,
                )
                data = await response.read()
                status = response.status
                retry_after = _seconds(response.headers.get("Retry-After"))
                response.release()
            except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                self._observe(method, path, 0)
                raise ApiError(0, f"{method} {path}: {unreachable(self.host, exc)}") from exc
        self._observe(method, path, status)
        return _decode(status, data, method, path, retry_after)

    def _observe(self, method: str, path: str, status: int) -> None:
        if self.observe is not None:
            self.observe(method, path, status)

    # ---- the calls the operator makes ---------------------------------------------------------------
    async def list(
        self,
        path: str,
        query: Mapping[str, str] | None = None,
        transform: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
        page_size: int = LIST_PAGE_SIZE,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Every item of a list URL, fetched in pages of ``page_size`` (``limit``/``continue``) so that a
        12,500-node list is never one 60 MB response decoded at once; ``transform`` (a store's slimming)
        runs on each page before the next is fetched, so only the slimmed items stay in memory. A
        continue token that expired (410 mid-list) restarts the list from its first page. Pages go ahead of
        every write waiting for a slot (runtime/lanes.py)."""
        items: list[dict[str, Any]] = []
        params = {**(query or {}), "limit": str(page_size)}
        version: str | None = None
        while True:
            try:
                data = await self.request("GET", path, query=params, first=True)
            except ApiError as exc:
                if exc.status == 410 and "continue" in params:
                    items, params = [], {**(query or {}), "limit": str(page_size)}
                    continue
                raise
            kind = data.get("kind", "").removesuffix("List")
            api_version = data.get("apiVersion", "")
            for item in data.get("items") or []:
                item.setdefault("kind", kind)  # list items come without kind/apiVersion; humans need them
                item.setdefault("apiVersion", api_version)
                items.append(transform(item) if transform is not None else item)
            metadata = data.get("metadata") or {}
            version = metadata.get("resourceVersion") or version  # every page carries the first page's
            token = metadata.get("continue")
            if not token:
                return items, version
            params = {**params, "continue": str(token)}

    async def watch(
        self, path: str, resource_version: str | None, timeout_s: int = 300, query: Mapping[str, str] | None = None
    ) -> AsyncIterator[dict[str, Any]]:
        """Watch events ({type, object}) of a list URL from ``resource_version`` until the server ends it."""
        headers = await self._headers("application/json")
        params = {"watch": "1", "allowWatchBookmarks": "true", "timeoutSeconds": str(timeout_s), **(query or {})}
        if resource_version:
            params["resourceVersion"] = resource_version
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=timeout_s + 30)
        try:
            response = await self._session.get(
                self.host + path, params=params, headers=headers, timeout=timeout, **self._transport
            )
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            self._observe("WATCH", path, 0)
            raise ApiError(0, f"watch {path}: {unreachable(self.host, exc)}") from exc
        self._observe("WATCH", path, response.status)
        try:
            if response.status != 200:
                _decode(response.status, await response.read(), "GET", path)
            async for line in response.content:
                if line.strip():
                    event = parse_watch_line(line, path)
                    if event is not None:
                        yield event
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise ApiError(0, f"watch {path}: {exc!r}") from exc
        finally:
            response.release()

    async def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        """POST pods/binding with the pod's UID as precondition (the API refuses it for a replaced pod).

        Raw like every other call: the generated ``create_namespaced_pod_binding`` would need
        ``_preload_content=False`` anyway (it cannot parse the Status the server answers with), and its
        per-call serialization was a visible share of the operator's CPU in a binding storm."""
        path = f"{pod_path(namespace, name)}/binding"
        await self.request("POST", path, binding(namespace, name, uid, node))

    async def delete(self, path: str, uid: str | None = None, grace_seconds: int | None = None) -> dict[str, Any]:
        options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        if uid:
            options["preconditions"] = {"uid": uid}
        if grace_seconds is not None:
            options["gracePeriodSeconds"] = grace_seconds
        return await self.request("DELETE", path, body=options)

    async def merge_patch(self, path: str, patch: Mapping[str, Any]) -> dict[str, Any]:
        return await self.request("PATCH", path, body=patch, content_type="application/merge-patch+json")


def _seconds(header: str | None) -> float | None:
    """Retry-After in delta-seconds (what kube-apiserver sends); an HTTP date or garbage: none."""
    try:
        return float(header) if header is not None else None
    except ValueError:
        return None


def _decode(status: int, data: bytes, method: str, path: str, retry_after: float | None = None) -> dict[str, Any]:
    try:
        body = wire.decode(data) if data else {}
    except ValueError:
        body = {"message": data[:200].decode(errors="replace")}
    if 200 <= status < 300:
        return body if isinstance(body, dict) else {}
    message = body.get("message") if isinstance(body, dict) else None
    reason = body.get("reason", "") if isinstance(body, dict) else ""
    raise ApiError(status, str(message or f"{method} {path} failed"), str(reason), retry_after)


def pod_path(namespace: str, name: str = "") -> str:
    base = f"/api/v1/namespaces/{quote(namespace)}/pods"
    return f"{base}/{quote(name)}" if name else base


def job_path(namespace: str, name: str = "", subresource: str = "") -> str:
    from paralleljob.k8s.edge.constants import GROUP, PLURAL, VERSION

    path = f"/apis/{GROUP}/{VERSION}/namespaces/{quote(namespace)}/{PLURAL}"
    if name:
        path += f"/{quote(name)}"
    if subresource:
        path += f"/{subresource}"
    return path
