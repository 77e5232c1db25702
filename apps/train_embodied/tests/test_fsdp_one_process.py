"""`actor.fsdp_config` takes effect on an actor of one process (a plain module, no FSDP sharding): gradient
checkpointing recomputes the blocks in backward, `mixed_precision.param_dtype` runs the training forward in that
dtype, and what one process cannot honour is refused by the config check, naming the key."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from train_embodied.batches import SampleBatch
from train_embodied.config import ConfigError, load_train_config

pytestmark = pytest.mark.usefixtures("one_thread")

CONFIG = "metaworld_ppo_tiny_cpu"
SMALL = ["actor.model.image_size=32", "env.train.image_size=32", "env.eval.image_size=32"]
N = 16


def _actor(overrides: list[str]):
    """The actor worker the runner builds for `CONFIG` with `overrides` (its sections, as run_workers passes
    them), and a batch of samples its own policy drew."""
    from train_embodied.workers import ActorWorker

    tc = load_train_config(CONFIG, [*SMALL, *overrides], check_paths=False)
    actor = ActorWorker(
        tc.actor.model,
        {"action_dim": tc.actor.model.action_dim},
        tc.actor.optim,
        tc.algorithm,
        micro_batch_size=8,
        global_batch_size=16,
        seed=0,
        fsdp=tc.actor.fsdp_config,
    )
    assert actor.world_size == 1 and not actor.sharded
    rng = np.random.default_rng(0)
    obs = {
        "images": rng.integers(0, 255, size=(N, 32, 32, 3), dtype=np.uint8),
        "states": rng.normal(size=(N, 4)).astype(np.float32),
        "task_descriptions": ["close the drawer"] * N,
    }
    with torch.no_grad():
        out = actor.policy.predict(obs, mode="sample")
    batch = SampleBatch(
        forward_inputs=out.forward_inputs,
        old_logprobs=out.logprobs,
        advantages=torch.randn(N, generator=torch.Generator().manual_seed(0)),
        mask=torch.ones(N, dtype=torch.bool),
        action_mask=torch.ones(N, 1, dtype=torch.bool),
        old_values=out.values,
        returns=torch.rand(N),
    )
    return actor, batch


def _mlp_calls_per_update(overrides: list[str]) -> int:
    """Calls of the first decoder layer's MLP during one update. A checkpointed block runs its forward again in
    backward, calling the MLP a second time (a pre-hook: the recomputation stops once it has every tensor backward
    needs, before the MLP returns)."""
    actor, batch = _actor(overrides)
    layer = next(m for m in actor.policy.modules() if type(m).__name__ == "LlamaDecoderLayer")
    calls = []
    layer.mlp.register_forward_pre_hook(lambda *_: calls.append(torch.is_grad_enabled()))
    actor.train(batch, seed=1)
    return len(calls)


def test_gradient_checkpointing_recomputes_the_blocks_with_one_actor_process() -> None:
    passes = ["algorithm.update_epoch=4"]
    plain = _mlp_calls_per_update([*passes, "actor.fsdp_config.gradient_checkpointing=false"])
    checkpointed = _mlp_calls_per_update([*passes, "actor.fsdp_config.gradient_checkpointing=true"])
    # the guides' spelling `fsdp.gradient_checkpointing` reaches the same setting
    alias = _mlp_calls_per_update([*passes, "+fsdp.gradient_checkpointing=true"])
    assert plain == 8  # update_epoch 4 x 2 micro-batches, no recomputation
    assert checkpointed == alias == 2 * plain


def test_param_dtype_runs_the_training_forward_in_that_dtype() -> None:
    actor, batch = _actor(["actor.fsdp_config.mixed_precision.param_dtype=bf16"])
    layer = next(m for m in actor.policy.modules() if type(m).__name__ == "LlamaDecoderLayer")
    dtypes = []
    layer.mlp.register_forward_hook(lambda _m, _i, out: dtypes.append(out.dtype))
    metrics = actor.train(batch, seed=1)
    assert dtypes and set(dtypes) == {torch.bfloat16}
    assert np.isfinite(metrics["train/actor/policy_loss"])
    # parameters, gradients and optimizer state stay fp32 (the master weights), as FSDP2 keeps its fp32 shards
    assert {p.dtype for p in actor.policy.parameters()} == {torch.float32}
    logprobs, _, values = actor.policy.evaluate(batch.forward_inputs, compute_values=True)
    assert logprobs.dtype == values.dtype == torch.float32


def test_fp32_param_dtype_leaves_the_forward_in_fp32() -> None:
    actor, batch = _actor([])  # hybrid_engines/none: param_dtype fp32 on an fp32 model
    layer = next(m for m in actor.policy.modules() if type(m).__name__ == "LlamaDecoderLayer")
    dtypes = []
    layer.mlp.register_forward_hook(lambda _m, _i, out: dtypes.append(out.dtype))
    actor.train(batch, seed=1)
    assert set(dtypes) == {torch.float32}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "actor.fsdp_config.cpu_offload=true",
            r"actor\.fsdp_config\.cpu_offload=True is not supported with one",
        ),
        (
            "actor.fsdp_config.mixed_precision.buffer_dtype=bf16",
            r"actor\.fsdp_config\.mixed_precision\.buffer_dtype='bf16' is not supported",
        ),
        (
            "+actor.fsdp_config.mixed_precision.param_type=bf16",
            r"actor\.fsdp_config\.mixed_precision\.param_type is not a known key",
        ),
    ],
)
def test_settings_one_process_cannot_honour_are_refused(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_train_config(CONFIG, [*SMALL, override], check_paths=False)


def test_a_param_dtype_wider_than_the_model_is_refused_with_one_process() -> None:
    with pytest.raises(ConfigError, match=r"param_dtype='fp32' is wider than actor\.model\.precision='bf16'"):
        load_train_config(CONFIG, [*SMALL, "actor.model.precision=bf16"], check_paths=False)
    tc = load_train_config(
        CONFIG,
        [*SMALL, "actor.model.precision=bf16", "actor.fsdp_config.mixed_precision.param_dtype=bf16"],
        check_paths=False,
    )
    assert tc.actor.fsdp_config.mixed_precision["param_dtype"] == "bf16"
