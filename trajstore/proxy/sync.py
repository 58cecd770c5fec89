"""Weight sync for ``traj proxy``: which policy version the upstream holds, and loading new ones.

:class:`Versioning` knows which policy version the upstream holds and which calls are in
flight. :class:`WeightSync` follows a training run's published versions
(``policies/<run>/LATEST``, :mod:`trajstore.policies`) and asks the upstream to load each new
one with SGLang's ``POST /update_weights_from_disk`` (``traj serve`` speaks it too), or, on a
vLLM that answers that 404, with vLLM's dev endpoints (``POST /collective_rpc``
``reload_weights``, then ``POST /reset_prefix_cache``). In ``drain`` mode new calls wait while
the in-flight ones finish, so no call crosses a reload; in ``tag`` mode calls keep flowing and
each one is labelled from what the upstream reports (per-token versions are split into separate
action spans, otherwise a call that crossed a reload is flagged with both versions). Without
weight sync, :class:`ModelPathWatch` learns the version from the model path the upstream serves
(``GET /v1/models``), and ``POST /proxy/policy_version`` sets it by hand. Bounded staleness is
:mod:`trajstore.proxy.staleness`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from trajstore.errors import TrajstoreError
from trajstore.policies import latest_policy_version
from trajstore.store import Store
from trajstore.store.layout import version_dir, version_dir_name

log = logging.getLogger("trajstore.proxy")

ReloadMode = Literal["drain", "tag"]
VersionSource = Literal["default", "weight sync", "model path", "manual"]
"""Where the proxy's idea of the upstream's version comes from: ``--policy-version``, a load it
asked for, the model path the upstream reports, or ``POST /proxy/policy_version``."""

_POLICY_PATH = re.compile(r"(?:^|/)policies/[^/]+/v(\d+)/*$")


def version_of_model_path(path: object) -> int | None:
    """N for a published version folder ``.../policies/<run>/v<N>`` (what ``traj train``
    publishes and ``--run`` loads), None for any other model name or path."""
    if not isinstance(path, str):
        return None
    m = _POLICY_PATH.search(path.strip().replace("\\", "/"))
    return int(m.group(1)) if m else None


@dataclass
class Ticket:
    """What :meth:`Versioning.call` hands a call: the version and reload epoch at its start."""

    version: int | None
    epoch: int


class Versioning:
    """The upstream's policy version as the proxy knows it, and the calls in flight.

    Args:
        version: the version the upstream holds at start (None = unknown).
        mode: ``drain`` = reloads wait for in-flight calls and hold new ones; ``tag`` = no waiting.
    """

    def __init__(self, version: int | None, *, mode: ReloadMode = "drain"):
        self.version = version
        self.source: VersionSource = "default"
        self.mode = mode
        self.epoch = 0
        self.in_flight = 0
        self._open = asyncio.Event()
        self._open.set()
        self._idle = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def call(self) -> AsyncIterator[Ticket]:
        """Around one upstream call: waits while a drain-mode reload runs."""
        await self._open.wait()
        self.in_flight += 1
        try:
            yield Ticket(self.version, self.epoch)
        finally:
            self.in_flight -= 1
            async with self._idle:
                self._idle.notify_all()

    @contextlib.asynccontextmanager
    async def reloading(self, drain_timeout_s: float) -> AsyncIterator[None]:
        """Hold new calls and wait (at most `drain_timeout_s`) for in-flight ones in drain mode."""
        if self.mode == "drain":
            self._open.clear()
            try:
                async with self._idle:
                    await asyncio.wait_for(self._idle.wait_for(lambda: self.in_flight == 0), drain_timeout_s)
            except asyncio.TimeoutError:
                log.warning("drain timeout: %d call(s) still in flight cross this reload (they are flagged)",
                            self.in_flight)
        try:
            yield
        finally:
            self._open.set()

    def loaded(self, version: int, source: VersionSource = "weight sync") -> None:
        """The upstream now serves `version` (a call that runs across this is flagged with both)."""
        self.version = version
        self.source = source
        self.epoch += 1


class ModelPathWatch:
    """Without weight sync: learns the upstream's version from the model path it serves.

    ``GET /v1/models`` reports each served model's path (vLLM: ``root``, else ``id``); an
    upstream started, or restarted by hand, on a published version folder
    ``.../policies/<run>/v<N>`` serves version N. Only a change of that path's version is
    applied, so a version set by hand (``POST /proxy/policy_version``) stays until the path
    names another one.

    Args:
        client: the proxy's httpx client (its base URL is the upstream).
        versioning: set when the path names a new version.
        headers: upstream auth headers.
        poll_s: seconds between polls.
    """

    def __init__(self, client: httpx.AsyncClient, versioning: Versioning, *, headers: dict[str, str],
                 poll_s: float):
        self.client = client
        self.versioning = versioning
        self.headers = headers
        self.poll_s = poll_s
        self.seen: int | None = None
        """The version the last model path named (None: none yet)."""

    async def poll_once(self, timeout_s: float = 5.0) -> int | None:
        """Read the upstream's model path; return the version it names (None: none, or unreachable)."""
        try:
            r = await self.client.get("/v1/models", headers=self.headers, timeout=timeout_s)
            models = r.json().get("data") if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return None
        for m in models if isinstance(models, list) else []:
            if not isinstance(m, dict):
                continue
            for key in ("root", "id"):
                v = version_of_model_path(m.get(key))
                if v is None:
                    continue
                if v != self.seen:
                    self.seen = v
                    if v != self.versioning.version:
                        self.versioning.loaded(v, "model path")
                        log.info("the upstream serves %s: calls are recorded as policy v%d", m.get(key), v)
                return v
        return None

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            await self.poll_once()


def local_version_path(store: Store, run_id: str, version: int, cache_dir: str | None) -> str:
    """A filesystem path of a published version the upstream can read: the folder itself for a
    local store, else a copy downloaded into `cache_dir` (the upstream must see that folder)."""
    rel = version_dir(run_id, version)
    if store.is_local:
        return store.path(rel)
    if not cache_dir:
        raise TrajstoreError(f"{store.url(rel)} is not on a local disk; pass --weights-cache DIR (a folder the "
                             "upstream server can read) to download published versions there")
    dest = os.path.join(cache_dir, run_id, version_dir_name(version))  # the store's layout, on a local disk
    if not os.path.isdir(dest):
        tmp = dest + f".tmp-{os.getpid()}"
        store.fs.get(store.path(rel), tmp, recursive=True)
        os.replace(tmp, dest)
    return dest


class WeightSync:
    """Polls a run's latest published version and has the upstream load new ones.

    Args:
        client: the proxy's httpx client (its base URL is the upstream).
        store, run_id: where the versions are published.
        versioning: updated after each successful load.
        headers: upstream auth headers.
        poll_s: seconds between polls; drain_timeout_s: see :meth:`Versioning.reloading`.
        cache_dir: local copies of versions of a remote store.
        extra_body: more fields of the reload request (``{"mode": "retract"}`` asks ``traj serve``
            to continue in-flight calls under the new weights and report where they changed).
        engine: ``vllm``: an upstream that answers ``/update_weights_from_disk`` with 404 (vLLM;
            ``traj serve`` has it) is reloaded through vLLM's dev endpoints from then on.
    """

    def __init__(self, client: httpx.AsyncClient, store: Store, run_id: str, versioning: Versioning, *,
                 headers: dict[str, str], poll_s: float = 1.0, drain_timeout_s: float = 600.0,
                 reload_timeout_s: float = 900.0, cache_dir: str | None = None,
                 extra_body: dict[str, Any] | None = None, engine: str = "sglang"):
        self.client = client
        self.store = store
        self.run_id = run_id
        self.versioning = versioning
        self.headers = headers
        self.poll_s = poll_s
        self.drain_timeout_s = drain_timeout_s
        self.reload_timeout_s = reload_timeout_s
        self.cache_dir = cache_dir
        self.extra_body = dict(extra_body or {})
        self.engine = engine
        self.vllm_dev = False
        """Reload through vLLM's ``/collective_rpc`` (found when ``/update_weights_from_disk`` was 404)."""
        self.loads: list[tuple[int, float, int | None]] = []
        """Each successful load: (version, seconds, requests the upstream was generating when it
        loaded, its ``num_paused_requests``; None where it does not say, as vLLM)."""
        self.failures = 0

    async def _post(self, path: str, body: dict[str, Any] | None) -> httpx.Response:
        return await self.client.post(path, json=body, headers=self.headers, timeout=self.reload_timeout_s)

    async def _reload(self, path: str, version: int) -> tuple[bool, str, int | None]:
        """One reload request (or vLLM's two); (success, the upstream's message, the requests it
        was generating when it loaded: ``num_paused_requests``, None where it does not say)."""
        if not self.vllm_dev:
            r = await self._post("/update_weights_from_disk",
                                 {"model_path": path, "weight_version": str(version), **self.extra_body})
            if not (r.status_code == 404 and self.engine == "vllm"):
                body = r.json() if r.status_code == 200 else {}
                paused = body.get("num_paused_requests")
                in_flight = paused if isinstance(paused, int) and not isinstance(paused, bool) else None
                return r.status_code == 200 and bool(body.get("success", True)), r.text[:300], in_flight
            self.vllm_dev = True
            log.info("the upstream has no /update_weights_from_disk (vLLM): reloading with POST /collective_rpc "
                     "reload_weights, then POST /reset_prefix_cache")
        r = await self._post("/collective_rpc", {"method": "reload_weights", "kwargs": {"weights_path": path}})
        if r.status_code == 404:
            return False, "vLLM answers /collective_rpc with 404: start it with VLLM_SERVER_DEV_MODE=1", None
        if r.status_code != 200:
            return False, f"/collective_rpc reload_weights: HTTP {r.status_code} {r.text[:300]}", None
        c = await self._post("/reset_prefix_cache", None)
        if c.status_code != 200:  # the weights are the new ones; cached prefixes of the old may be reused
            log.warning("upstream loaded policy v%d but did not reset its prefix cache (HTTP %d): prefixes "
                        "computed under the old weights may be reused", version, c.status_code)
        return True, "", None

    async def load(self, version: int) -> bool:
        """Ask the upstream to load `version`; True on success (failures are logged, retried later)."""
        path = await asyncio.to_thread(local_version_path, self.store, self.run_id, version, self.cache_dir)
        t0 = time.perf_counter()
        async with self.versioning.reloading(self.drain_timeout_s):
            try:
                ok, msg, in_flight = await self._reload(path, version)
            except (httpx.HTTPError, ValueError) as e:
                ok, msg, in_flight = False, f"{type(e).__name__}: {e}", None
            if ok:
                self.versioning.loaded(version)
        if ok:
            self.loads.append((version, time.perf_counter() - t0, in_flight))
            log.info("upstream loaded policy v%d (%.1fs)", version, time.perf_counter() - t0)
        else:
            self.failures += 1
            log.warning("upstream failed to load policy v%d: %s", version, msg)
        return ok

    async def poll_once(self) -> int | None:
        """Load the latest version if it is newer than the upstream's; return it when loaded."""
        latest = await asyncio.to_thread(latest_policy_version, self.store, self.run_id)
        cur = self.versioning.version
        if latest is None or (cur is not None and latest <= cur):
            return None
        return latest if await self.load(latest) else None

    async def run(self) -> None:
        while True:
            try:
                await self.poll_once()
            except Exception as e:  # noqa: BLE001 - keep following; the next poll retries
                log.warning("weight sync: %s: %s", type(e).__name__, e)
            await asyncio.sleep(self.poll_s)
