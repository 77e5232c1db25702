"""Atomic checkpoints in formats that cannot run code: safetensors for tensors, JSON for everything else.

Layout of ``<root>/global_step_<N>/``::

    model.safetensors          full (unsharded) model weights, written by rank 0
    state/trainer.json         the trainer state (rank 0)
    state/rank<r>.json         rank r's optimizer state and RNG states, tensors replaced by references into ...
    state/rank<r>.safetensors  ... rank r's tensors (its local shards of a sharded optimizer state)
    manifest.json              format version, step, world size, every file with its size and sha256
    COMPLETE                   written last

Nothing is unpickled on load: JSON holds only numbers, strings, lists and dicts (tuples, numpy arrays and dicts
with non-string keys are tagged), and every tensor comes from a safetensors file. A sharded optimizer state is
saved as each rank's local shards; loading it needs the world size it was saved with (refused otherwise, one
line naming both sizes). Checkpoints of format 1 (PyTorch DCP, whose metadata is read with pickle) are refused.

Everything is written into ``<dir>.tmp-<uuid>`` first; after all files are fsync'ed the manifest and the
``COMPLETE`` marker are written and the directory is renamed to its final name (one atomic ``rename``), then
the parent directory is fsync'ed. A process killed at any point leaves either the previous checkpoints and a
``*.tmp-*`` directory (ignored by :func:`latest_checkpoint`) or the new
complete checkpoint. A save that fails (a full disk: ``OSError``) removes its temporary directory and raises
:class:`CheckpointSaveError`, one line naming the folder and the cause; older checkpoints are untouched. An
overwrite renames the old directory to ``<dir>.old-<uuid>`` before renaming the new one into place; if it is
killed between the two renames, :func:`latest_checkpoint` moves the complete copy
(the new ``.tmp-*`` if complete, else the ``.old-*``) back to ``<dir>``. With an initialised process group every
rank calls :func:`save_checkpoint` / :func:`load_checkpoint` together and writes its own optimizer shards.

:func:`load_checkpoint` checks every file against the manifest (size and sha256) and raises
:class:`CheckpointError` with one line naming a missing, truncated or altered file, a tensor whose shape differs
from the model's, or a file that is not what its name says; ``latest_checkpoint(root, verify=True)`` skips
damaged checkpoints (saying why in ``skipped``) and returns the newest intact one.

Modules: ``files`` (names, errors, fsync and hashing), ``state_files`` (a nested state as JSON + safetensors),
``rng``, ``save``, ``verify`` (the manifest checks), ``discovery`` (the newest complete checkpoint, recovering an
interrupted overwrite), ``load``.
"""

from __future__ import annotations

from vla_infra.checkpoint.discovery import latest_checkpoint
from vla_infra.checkpoint.files import (
    COMPLETE_MARKER,
    MANIFEST,
    MODEL_FILE,
    CheckpointError,
    CheckpointSaveError,
    checkpoint_dir,
)
from vla_infra.checkpoint.load import LoadedCheckpoint, load_checkpoint, read_trainer_state
from vla_infra.checkpoint.rng import capture_rng_state, restore_rng_state
from vla_infra.checkpoint.save import save_checkpoint
from vla_infra.checkpoint.verify import checkpoint_problem, checkpoint_tensor_shapes, is_complete

__all__ = [
    "COMPLETE_MARKER",
    "MANIFEST",
    "MODEL_FILE",
    "CheckpointError",
    "CheckpointSaveError",
    "LoadedCheckpoint",
    "capture_rng_state",
    "checkpoint_dir",
    "checkpoint_problem",
    "checkpoint_tensor_shapes",
    "is_complete",
    "latest_checkpoint",
    "load_checkpoint",
    "read_trainer_state",
    "restore_rng_state",
    "save_checkpoint",
]
