"""The driver's part of the actor -> rollout weight protocol (:class:`WeightSyncCoordinator`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vla_infra.weight_sync.update import StaleWeightsError
from vla_infra.workers.failures import WorkerFailure

if TYPE_CHECKING:
    from vla_infra.workers.group import WorkerGroup


class WeightSyncCoordinator:
    """The driver's part of the weight protocol, between an actor and a rollout worker group.

    The workers hold a :class:`WeightSync` each and expose it as these registered methods (the names this class
    calls; :class:`WeightSenderWorker` and :class:`WeightReceiverWorker` define them): the actor group
    ``weight_sync_endpoint`` (rank 0), ``join_weight_sync(host, port, world_size, backend)``,
    ``send_weights(version)`` and ``state_dict()`` (full CPU tensors: the actor's own); the rollout group
    ``join_weight_sync(...)``, ``receive_weights(version)`` (not restarted on a dead worker: the group it
    waits in is gone), ``weight_version()`` and ``load_weights(state_dict, version)``.

    Args:
        actor, rollout: The two worker groups.
        in_process: Actor and rollout share this process (local backend): a sync copies the actor's state dict
            into the rollout. Else the actor's rank 0 broadcasts straight to the rollout ranks over a peer group
            (NCCL when every member has a GPU, else gloo); only version numbers pass through here.
    """

    def __init__(self, actor: WorkerGroup, rollout: WorkerGroup, *, in_process: bool) -> None:
        self.actor, self.rollout, self.in_process = actor, rollout, in_process
        self.version: int | None = None  # the version last synced to the rollout (None: never)
        self._joined = False

    def sync(self, version: int) -> dict[str, int] | None:
        """Sync the actor's weights to every rollout rank as ``version``.

        A rollout rank that died before or during the sync is replaced (the rollout group's ``max_restarts``; its
        ``on_restart`` calls :meth:`resync`) and the sync runs again over a new peer group.

        Returns:
            Across processes: the ``tensors`` and ``bytes`` rollout rank 0 received; in one process: None.

        Raises:
            StaleWeightsError: ``version`` is not newer than the last synced one.
        """
        if self.version is not None and version <= self.version:
            raise StaleWeightsError(
                f"weight version {version} is not newer than the last synced version {self.version}"
            )
        received = None
        if self.in_process:
            self.rollout.load_weights(self.actor.state_dict(), version)
        else:
            for attempt in range(1 + self.rollout.max_restarts):
                restarts = self.rollout.num_restarts
                self.rollout.weight_version.submit().result()  # a dead rank is replaced (and re-synced) here
                try:
                    received = self._send(version)
                    break
                except WorkerFailure:  # a worker that does not answer, a lost node: no retry can help
                    raise
                except Exception:
                    self.rollout.weight_version.submit().result()  # was it a rollout rank that died?
                    if self.rollout.num_restarts == restarts or attempt == self.rollout.max_restarts:
                        raise
        self.version = version
        return received

    def resync(self, rank: int) -> None:
        """Rollout rank ``rank`` is a new process with its own initial weights and no place in the peer group:
        rebuild the group and send the current version again (to every rank: a new group's first send is a full
        one), so the rank generates with the actor's weights, bit for bit. In one process nothing to do (the
        rollout group replays ``load_weights``)."""
        if self.in_process:
            return
        self._joined = False
        if self.version is not None:
            self._send(self.version)

    def connect(self) -> None:
        """(Re)build the peer group: every member joins at once; the next sync is a full one."""
        members = [self.actor.placements[0], *self.rollout.placements]
        backend = "nccl" if all(p.local_gpu is not None for p in members) else "gloo"
        host, port = self.actor.weight_sync_endpoint()
        world = 1 + self.rollout.world_size
        joins = [
            self.actor.join_weight_sync.submit(host, port, world, backend),
            self.rollout.join_weight_sync.submit(host, port, world, backend),
        ]
        for j in joins:
            j.result()
        self._joined = True

    def _send(self, version: int) -> dict[str, int]:
        if not self._joined:
            self.connect()
        sent = self.actor.send_weights.submit(version)
        receiving = self.rollout.receive_weights.submit(version)
        try:
            sent.result()
            return receiving.result()
        except Exception:
            # the sender dropped its end of the group, so receivers still waiting fail fast; rebuild next time
            self._joined = False
            raise
