"""Ray backend: one Ray actor per placed process, pinned to its node and GPU.

GPU clusters: at start the backend reserves, on each of ``num_nodes`` nodes, one placement group
with one ``{"GPU": 1}`` bundle per GPU (``STRICT_PACK``, so a group is exactly one node). Node rank
``i`` is the node of placement group ``i`` (the driver's node first). A process placed on local GPU
``g`` runs in the bundle that holds GPU ``g`` and asks for ``gpu_fraction`` of it (several processes,
also of different components, may share one GPU), so Ray sets ``CUDA_VISIBLE_DEVICES`` to that GPU
and the worker uses ``cuda:0``. Which GPU id Ray gives each bundle is learned from the first actors
placed there (usually bundle ``g`` holds GPU ``g``); an actor that landed on another GPU is relaunched
in the right bundle before any user code runs.

CPU clusters (``num_gpus_per_node=0``): processes are pinned to nodes with
``NodeAffinitySchedulingStrategy``.

Node ranks: if the cluster's nodes carry the label ``vla-infra/node-rank`` (``ray start --labels
vla-infra/node-rank=1``, what ``RLINF_NODE_RANK`` is to the reference framework), node rank ``i`` is the alive node
labelled ``i``, so a node that replaces a lost one takes its rank. Otherwise the driver's node comes first, then the
others by address.

Failures: a call that waits longer than its timeout raises ``GetTimeoutError`` (the group turns it into a
``WorkerTimeout``); while a call runs the backend checks every few seconds whether one of its nodes left the cluster
(``lost_node``). An actor that does not answer is killed without waiting (``shutdown(force=True)``).

A private instance (no address) dies with the driver however the driver ends: ``ray.init`` installs a handler that
dumps a native stack and aborts on SIGTERM, which is put back to the Python handler the process had before, and a
small watcher process (``ray_reaper.py``) kills the Ray processes left when the driver is gone (after a SIGKILL
Ray's agents would otherwise live on for about a minute).

Before the worker's ``__init__`` runs, the actor sets ``MASTER_ADDR`` (rank 0's node address),
``MASTER_PORT`` (a free port there), ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE``.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vla_infra.channel import RayChannel
from vla_infra.placement import ProcessPlacement
from vla_infra.workers.backend import Backend, WorkerHandle
from vla_infra.workers.failures import WorkerTimeout
from vla_infra.workers.worker import Worker, WorkerInfo, construct_worker, find_free_port

logger = logging.getLogger(__name__)

#: Node label that gives a Ray node its node rank (``ray start --labels vla-infra/node-rank=<i>``).
NODE_RANK_LABEL = "vla-infra/node-rank"
#: Seconds between two checks for a lost node while the driver waits for a call.
LIVENESS_CHECK_S = 5.0


class _RayWorkerHost:
    """The Ray actor that holds one worker (calls run one at a time, in order)."""

    def __init__(self) -> None:
        self.worker: Worker | None = None

    def rendezvous(self) -> tuple[str, int]:
        import ray

        address = ray.util.get_node_ip_address()
        return address, find_free_port(address)

    def gpu_ids(self) -> list[int]:
        import ray

        return [int(i) for i in ray.get_gpu_ids()]

    def construct(self, worker_cls: type[Worker], info: WorkerInfo, args: tuple, kwargs: dict) -> str:
        """Build the worker; returns where it runs (for messages)."""
        import ray

        os.environ.update(info.dist_env())
        self.worker = construct_worker(worker_cls, info, args, kwargs)
        return f"pid {os.getpid()} on node {ray.util.get_node_ip_address()}"

    def execute(self, method: str, args: tuple, kwargs: dict) -> Any:
        return getattr(self.worker, method)(*args, **kwargs)

    def close(self) -> None:
        close = getattr(self.worker, "close", None)
        if callable(close):
            close()

    def alive(self) -> bool:
        """Answers on its own thread (the ``probe`` concurrency group) while a call runs: a process that does not
        answer is stopped or frozen, not merely busy."""
        return True


_HOST_CLASS: Any = None


def _host_class() -> Any:
    """The Ray actor class of :class:`_RayWorkerHost`: calls run one at a time, in order; ``alive`` beside them."""
    global _HOST_CLASS
    if _HOST_CLASS is None:
        import ray

        alive = ray.method(concurrency_group="probe")(_RayWorkerHost.alive)
        _RayWorkerHost.alive = alive  # type: ignore[method-assign]
        _HOST_CLASS = ray.remote(concurrency_groups={"probe": 1})(_RayWorkerHost)
    return _HOST_CLASS


class NodeGone(RuntimeError):
    """A node of the backend left the cluster while the driver waited for a call (its group names it)."""


class _RayFuture:
    def __init__(self, ref: Any, backend: RayBackend | None = None) -> None:
        self.ref = ref
        self.backend = backend

    def done(self) -> bool:
        import ray

        ready, _ = ray.wait([self.ref], timeout=0)
        return bool(ready)

    def result(self, timeout: float | None = None) -> Any:
        """The call's value; waits in slices of ``LIVENESS_CHECK_S`` and raises :class:`NodeGone` as soon as a node
        of the backend is found gone (a call on a surviving node may wait forever on one that is gone)."""
        import ray
        from ray.exceptions import GetTimeoutError

        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = LIVENESS_CHECK_S if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return ray.get(self.ref, timeout=min(left, LIVENESS_CHECK_S))
            except GetTimeoutError:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                if self.backend is not None and self.backend.lost_node() is not None:
                    raise NodeGone("a node of the Ray cluster was lost") from None


class RayWorkerHandle(WorkerHandle):
    """A worker living in a Ray actor; ``info`` is what the worker was built with (a replacement gets it too)."""

    def __init__(
        self, actor: Any, info: WorkerInfo, backend: RayBackend | None = None, where: str = ""
    ) -> None:
        self.actor = actor
        self.info = info
        self.backend = backend
        self.where = where

    def submit(self, method: str, args: tuple, kwargs: dict) -> _RayFuture:
        return _RayFuture(self.actor.execute.remote(method, args, kwargs), self.backend)

    def probe(self) -> Any:
        return self.actor.alive.remote()

    def shutdown(self, *, force: bool = False) -> None:
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError

        try:
            if not force:
                ray.get(self.actor.close.remote(), timeout=30)
        except (RayActorError, GetTimeoutError):
            pass  # the actor is gone, or does not answer: killed below
        finally:
            ray.kill(self.actor)


LOOPBACK_ENV_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
"""With this set to ``0`` before ``import ray``, Ray keeps ``_node_ip_address="127.0.0.1"`` (else it replaces
loopback with the machine's network address)."""


def ray_init_kwargs(address: str | None) -> dict[str, Any]:
    """``ray.init`` arguments of :class:`RayBackend` when Ray is not initialised yet.

    Args:
        address: a cluster to join (``"auto"``, ``"<host>:<port>"``, ``"ray://..."``), or None.

    Returns:
        ``{"address": address}`` to join a cluster (also when ``address`` is None but ``RAY_ADDRESS`` is set:
        Ray reads it); else the arguments of a new local instance bound to 127.0.0.1 without dashboard.
    """
    if address or os.environ.get("RAY_ADDRESS"):
        return {"address": address}
    return {"address": "local", "_node_ip_address": "127.0.0.1", "include_dashboard": False}


class RayBackend(Backend):
    """Runs each worker in its own Ray actor on the node and GPU its placement names.

    If Ray is already initialised, the backend uses that instance as it is. Otherwise:

    * ``address`` given (``"auto"`` joins the cluster started with ``ray start --head`` / ``ray start
      --address=...``, or ``"<head-ip>:6379"``), or ``RAY_ADDRESS`` set: ``ray.init(address=address)`` joins
      that cluster; nothing is forced onto loopback (the other nodes must reach this one).
    * no address: a new private local instance is started with every address on 127.0.0.1
      (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` in the environment, ``_node_ip_address="127.0.0.1"``, no
      dashboard; ``address="local"``, so a leftover "current cluster" file is never joined). The variable is
      set with ``setdefault`` and stays set (Ray's processes inherit it); if ``ray`` was imported before with
      the variable unset, Ray may still report the machine's address, so set it before importing ray.
      :meth:`shutdown` stops an instance the backend started (``owns_ray``).

    Args:
        num_nodes: ``cluster.num_nodes``; the Ray cluster needs at least this many suitable nodes.
        num_gpus_per_node: ``cluster.num_gpus_per_node``; each used node must have this many GPUs.
        address: Ray cluster to join when Ray is not initialised yet; None starts a local loopback instance.
        num_cpus_per_worker: Ray CPU resource each worker actor asks for (default 0: workers are
            scheduled by GPU and node only, and simulators may use every core).
        runtime_env: Optional Ray runtime environment of the worker actors.
        node_wait_s: On a cluster it joins (an address, or Ray already initialised), how long to wait for
            ``num_nodes`` suitable nodes to be alive (nodes still joining, or a lost node being replaced) before
            giving up; a private instance never grows, so it never waits.
    """

    name = "ray"

    def __init__(
        self,
        *,
        num_nodes: int,
        num_gpus_per_node: int,
        address: str | None = None,
        num_cpus_per_worker: float = 0.0,
        runtime_env: dict[str, Any] | None = None,
        node_wait_s: float = 0.0,
    ) -> None:
        kwargs = ray_init_kwargs(address)
        imported = sys.modules.get("ray")
        private = "_node_ip_address" in kwargs and (imported is None or not imported.is_initialized())
        if private:
            # read by Ray at import (for this process) and by every Ray process it starts: loopback only
            os.environ.setdefault(LOOPBACK_ENV_VAR, "0")
        import ray

        #: True if this backend started Ray or connected to a cluster (then :meth:`shutdown` stops or leaves it).
        self.owns_ray = not ray.is_initialized()
        self._reaper: subprocess.Popen | None = None
        if self.owns_ray:
            _init_keeping_sigterm(kwargs)
            if private:
                self._reaper = _start_reaper()
        self.num_nodes = num_nodes
        self.num_gpus_per_node = num_gpus_per_node
        self.num_cpus_per_worker = num_cpus_per_worker
        self.runtime_env = runtime_env
        self._placement_groups: list[Any] = []
        # node rank -> {bundle index: GPU id Ray gave that bundle}, learned from the actors placed there
        self._gpu_of_bundle: dict[int, dict[int, int]] = {}
        self.node_addresses: list[str] = []
        self._lost: tuple[int, str, str] | None = None
        try:
            self.node_ids: list[str] = self._wait_for_nodes(node_wait_s if not private else 0.0)
            if num_gpus_per_node > 0:
                self._reserve_gpus()
        except BaseException:
            self.shutdown()  # leave no placement group, nor a Ray instance this backend started
            raise

    def _wait_for_nodes(self, wait_s: float) -> list[str]:
        """:meth:`_pick_nodes`, trying again for up to ``wait_s`` seconds while the cluster is too small."""
        deadline = time.monotonic() + wait_s
        waiting = False
        while True:
            try:
                return self._pick_nodes()
            except ValueError as exc:
                if time.monotonic() >= deadline:
                    raise ValueError(f"{exc} (waited {wait_s:g} s)" if waiting else str(exc)) from None
                if not waiting:
                    logger.warning("%s; waiting up to %g s for nodes to join", exc, wait_s)
                    waiting = True
                time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))

    def _pick_nodes(self) -> list[str]:
        """The Ray node of each node rank (by the ``NODE_RANK_LABEL`` label when the nodes carry it)."""
        import ray

        driver_node = ray.get_runtime_context().get_node_id()
        nodes = [
            n
            for n in ray.nodes()
            if n.get("Alive") and n.get("Resources", {}).get("GPU", 0) >= self.num_gpus_per_node
        ]
        where = f"cluster.num_nodes={self.num_nodes} with cluster.num_gpus_per_node={self.num_gpus_per_node}"
        ranked = {}
        for n in nodes:
            label = (n.get("Labels") or {}).get(NODE_RANK_LABEL)
            if label is not None and str(label).isdigit():
                ranked.setdefault(int(label), n)
        if ranked:
            missing = [r for r in range(self.num_nodes) if r not in ranked]
            if missing:
                raise ValueError(
                    f"{where}, but no alive node of the Ray cluster with that many GPUs is labelled "
                    f"{NODE_RANK_LABEL}={missing[0]} (labelled: {sorted(ranked)})"
                )
            chosen = [ranked[r] for r in range(self.num_nodes)]
        else:
            nodes.sort(key=lambda n: (n["NodeID"] != driver_node, n["NodeManagerAddress"], n["NodeID"]))
            if len(nodes) < self.num_nodes:
                raise ValueError(
                    f"{where}, but the Ray cluster has only {len(nodes)} alive node(s) with that many GPUs"
                )
            chosen = nodes[: self.num_nodes]
        self.node_addresses = [str(n["NodeManagerAddress"]) for n in chosen]
        return [n["NodeID"] for n in chosen]

    def lost_node(self) -> tuple[int, str, str] | None:
        """The first node of this backend that is no longer alive in the cluster: ``(node rank, id, address)``."""
        if self._lost is not None:
            return self._lost
        import ray

        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        for rank, node_id in enumerate(self.node_ids):
            if node_id not in alive:
                self._lost = (rank, node_id, self.node_addresses[rank] if self.node_addresses else "?")
                return self._lost
        return None

    def timed_out(self, exc: BaseException) -> bool:
        from ray.exceptions import GetTimeoutError

        return isinstance(exc, GetTimeoutError)

    def unresponsive(self, handles: Sequence[WorkerHandle], timeout_s: float) -> list[bool] | None:
        """Which of ``handles`` do not answer a probe within ``timeout_s`` (stopped, frozen or dead); all probed at
        once."""
        import ray

        refs = [h.probe() for h in handles if isinstance(h, RayWorkerHandle)]
        if len(refs) != len(handles):
            return None
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout_s)
        answered = set()
        for ref in done:
            try:
                ray.get(ref, timeout=0)
                answered.add(ref)
            except Exception:  # a dead actor's probe fails: it does not answer either
                continue
        return [ref not in answered for ref in refs]

    def _reserve_gpus(self) -> None:
        import ray
        from ray.util.placement_group import placement_group, placement_group_table

        for node_rank, node_id in enumerate(self.node_ids):
            pg = placement_group(
                [{"GPU": 1.0}] * self.num_gpus_per_node, strategy="STRICT_PACK", _soft_target_node_id=node_id
            )
            ray.get(pg.ready(), timeout=120)
            self._placement_groups.append(pg)
            # Soft targeting may pick another node; the node actually used defines this rank.
            self.node_ids[node_rank] = placement_group_table(pg)["bundles_to_node_id"][0]
            self._gpu_of_bundle[node_rank] = {}

    def _bundle_for(self, node_rank: int, local_gpu: int) -> int:
        """The bundle that holds ``local_gpu`` (learned from actors; guess bundle == GPU until known)."""
        learned = self._gpu_of_bundle[node_rank]
        for bundle, gpu in learned.items():
            if gpu == local_gpu:
                return bundle
        if local_gpu not in learned:
            return local_gpu
        return next(b for b in range(self.num_gpus_per_node) if b not in learned)

    def _actor_options(self, p: ProcessPlacement) -> tuple[dict[str, Any], int | None]:
        """Ray actor options for one process, and the bundle it goes to (None on the CPU)."""
        from ray.util.scheduling_strategies import (
            NodeAffinitySchedulingStrategy,
            PlacementGroupSchedulingStrategy,
        )

        options: dict[str, Any] = {"num_cpus": self.num_cpus_per_worker, "max_concurrency": 1}
        if self.runtime_env is not None:
            options["runtime_env"] = self.runtime_env
        if p.local_gpu is None:
            options["num_gpus"] = 0
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
                self.node_ids[p.node_rank], soft=False
            )
            return options, None
        if p.node_rank >= self.num_nodes or p.local_gpu >= self.num_gpus_per_node:
            raise ValueError(
                f"{p.component} rank {p.rank} is placed on node {p.node_rank} GPU {p.local_gpu}, but this "
                f"RayBackend reserved {self.num_nodes} node(s) x {self.num_gpus_per_node} GPU(s)"
            )
        pg = self._placement_groups[p.node_rank]
        bundle = self._bundle_for(p.node_rank, p.local_gpu)
        # Ray counts GPU shares in units of 1e-4; round down so k shares always fit in one GPU.
        options["num_gpus"] = math.floor(p.gpu_fraction * 1e4) / 1e4
        options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
            pg, placement_group_bundle_index=bundle
        )
        return options, bundle

    def launch(
        self,
        worker_cls: type[Worker],
        placements: Sequence[ProcessPlacement],
        *,
        group: str,
        args: tuple,
        kwargs: dict,
        timeout_s: float | None = None,
    ) -> list[WorkerHandle]:
        import ray

        actors: list[Any] = []
        try:
            actors = self._start_actors(placements, group, timeout_s)
            master_addr, master_port = self._get(
                [actors[0].rendezvous.remote()], group, [placements[0].rank], "rendezvous", timeout_s
            )[0]
            infos = [
                WorkerInfo.from_placement(
                    p,
                    group=group,
                    device="cpu" if p.local_gpu is None else "cuda:0",
                    master_addr=master_addr,
                    master_port=master_port,
                    backend=self.name,
                )
                for p in placements
            ]
            refs = [a.construct.remote(worker_cls, info, args, kwargs) for a, info in zip(actors, infos)]
            wheres = self._get(refs, group, [p.rank for p in placements], "__init__", timeout_s)
        except BaseException:
            for actor in actors:  # none of them is handed out: stop them all
                ray.kill(actor)
            raise
        return [RayWorkerHandle(a, info, self, where) for a, info, where in zip(actors, infos, wheres)]

    def _get(
        self, refs: list[Any], group: str, ranks: list[int], method: str, timeout_s: float | None
    ) -> list[Any]:
        """``ray.get(refs)`` within ``timeout_s``; a :class:`WorkerTimeout` names the ranks not done."""
        import ray
        from ray.exceptions import GetTimeoutError

        try:
            return ray.get(refs, timeout=timeout_s)
        except GetTimeoutError:
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            pending = [r for r, ref in zip(ranks, refs) if ref not in done] or ranks
            raise WorkerTimeout(group, pending, method, float(timeout_s or 0.0)) from None

    def _start_actors(
        self, placements: Sequence[ProcessPlacement], group: str, timeout_s: float | None = None
    ) -> list[Any]:
        """One empty host actor per placement, each on its node and GPU."""
        import ray

        host_cls = _host_class()
        options = [self._actor_options(p) for p in placements]
        actors = [host_cls.options(**opts).remote() for opts, _ in options]
        bundles = [bundle for _, bundle in options]
        try:
            for _ in range(self.num_gpus_per_node + 1):
                wrong = self._check_gpus(placements, actors, bundles, group, timeout_s)
                if not wrong:
                    return actors
                for i in wrong:  # relaunch in the bundle now known (or guessed) to hold the right GPU
                    ray.kill(actors[i])
                    opts, bundles[i] = self._actor_options(placements[i])
                    actors[i] = host_cls.options(**opts).remote()
        except BaseException:
            for actor in actors:
                ray.kill(actor)
            raise
        for actor in actors:
            ray.kill(actor)
        raise RuntimeError(f"could not place {group} workers on their GPUs: {self._gpu_of_bundle}")

    def worker_died(self, exc: BaseException) -> bool:
        """A ``RayActorError`` (``ActorDiedError``, ``ActorUnavailableError``): the actor's process is gone or
        unreachable. An exception raised by the worker's own code arrives as a ``RayTaskError`` instead."""
        from ray.exceptions import RayActorError

        return isinstance(exc, RayActorError)

    def relaunch(
        self,
        handle: WorkerHandle,
        worker_cls: type[Worker],
        placement: ProcessPlacement,
        *,
        args: tuple,
        kwargs: dict,
        timeout_s: float | None = None,
    ) -> WorkerHandle:
        """A new actor on the dead one's node and GPU, built with the same :class:`WorkerInfo` (rank, world size,
        rendezvous address) and constructor arguments. The old actor is killed first, so an actor that was only
        unreachable cannot come back beside its replacement."""
        import ray

        if not isinstance(handle, RayWorkerHandle):
            raise TypeError(f"RayBackend.relaunch needs a RayWorkerHandle, got {type(handle).__name__}")
        ray.kill(handle.actor, no_restart=True)
        group, rank = handle.info.group, handle.info.rank
        (actor,) = self._start_actors([placement], group, timeout_s)
        try:
            ref = actor.construct.remote(worker_cls, handle.info, args, kwargs)
            (where,) = self._get([ref], group, [rank], "__init__", timeout_s)
        except BaseException:
            ray.kill(actor)
            raise
        return RayWorkerHandle(actor, handle.info, self, where)

    def _check_gpus(
        self,
        placements: Sequence[ProcessPlacement],
        actors: list[Any],
        bundles: list[int | None],
        group: str = "worker",
        timeout_s: float | None = None,
    ) -> list[int]:
        """Learn which GPU each used bundle holds; return the indices of misplaced actors."""
        refs = [a.gpu_ids.remote() for a in actors]
        gpu_ids = self._get(refs, group, [p.rank for p in placements], "start", timeout_s)
        wrong = []
        for i, (p, ids) in enumerate(zip(placements, gpu_ids)):
            if p.local_gpu is None:
                continue
            self._gpu_of_bundle[p.node_rank][bundles[i]] = ids[0]
            if ids != [p.local_gpu]:
                wrong.append(i)
        return wrong

    def create_channel(self, *, maxsize: int = 0, name: str | None = None) -> RayChannel:
        return RayChannel(maxsize=maxsize, name=name)

    def shutdown(self) -> None:
        from ray.util.placement_group import remove_placement_group

        for pg in self._placement_groups:
            remove_placement_group(pg)
        self._placement_groups = []
        self._gpu_of_bundle = {}
        if self.owns_ray:
            import ray

            ray.shutdown()
            self.owns_ray = False
        if self._reaper is not None:  # closing its pipe: it kills whatever Ray left running, then exits
            if self._reaper.stdin is not None:
                self._reaper.stdin.close()
            try:
                self._reaper.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._reaper.kill()
            self._reaper = None


def _init_keeping_sigterm(kwargs: dict[str, Any]) -> None:
    """``ray.init(**kwargs)``, then the process's Python SIGTERM handler again: Ray's own dumps a native stack and
    aborts, so the process could not shut its workers down (nor, after a default SIGTERM, leave quietly)."""
    import ray

    main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main else None
    ray.init(**kwargs)
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


def _start_reaper() -> subprocess.Popen | None:
    """The watcher of the Ray processes this driver just started (``ray_reaper.py``); None if Ray reports none."""
    import ray

    node = getattr(ray._private.worker, "_global_node", None)
    roots = [
        info.process.pid
        for infos in (getattr(node, "all_processes", None) or {}).values()
        for info in infos
        if getattr(info, "process", None) is not None
    ]
    if not roots:
        return None
    return subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("ray_reaper.py")), *map(str, roots)],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # a terminal's Ctrl-C reaches the driver, which shuts Ray down itself
    )
