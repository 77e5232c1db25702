"""FSDP2 helpers: config parsing on one process, and two-rank gloo training against single-process training."""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import tiny_transformer_jobs as helpers

from vla_infra.fsdp import (
    FSDPConfig,
    apply_fsdp2,
    enable_gradient_checkpointing,
    mixed_precision_policy,
    parse_dtype,
)


def test_parse_dtype_accepts_config_strings_and_names_bad_key() -> None:
    assert parse_dtype("bf16") is torch.bfloat16
    assert parse_dtype("float32") is torch.float32
    assert parse_dtype(torch.float16) is torch.float16
    with pytest.raises(ValueError, match=r"reduce_dtype='int8'.*allowed"):
        parse_dtype("int8", key="reduce_dtype")


def test_fsdp_config_from_dict_nested_mixed_precision_and_unknown_key() -> None:
    cfg = FSDPConfig.from_dict(
        {"mixed_precision": {"param_dtype": "bf16", "reduce_dtype": "fp32"}, "gradient_checkpointing": True}
    )
    assert (cfg.param_dtype, cfg.reduce_dtype, cfg.gradient_checkpointing) == ("bf16", "fp32", True)
    policy = mixed_precision_policy(cfg.param_dtype, cfg.reduce_dtype)
    assert (policy.param_dtype, policy.reduce_dtype) == (torch.bfloat16, torch.float32)
    with pytest.raises(ValueError, match="unknown fsdp_config keys"):
        FSDPConfig.from_dict({"sharding_stratgy": "full_shard"})
    with pytest.raises(ValueError, match="param_dtype='half8'"):
        FSDPConfig(param_dtype="half8")


def test_apply_fsdp2_needs_process_group() -> None:
    with pytest.raises(RuntimeError, match="process group"):
        apply_fsdp2(helpers.TinyTransformer())


def test_gradient_checkpointing_same_grads_and_names_single_process() -> None:
    torch.manual_seed(0)
    model = helpers.TinyTransformer()
    ckpt = copy.deepcopy(model)
    with pytest.raises(ValueError, match="NoSuchBlock"):
        enable_gradient_checkpointing(ckpt, wrap_classes=["NoSuchBlock"])
    assert enable_gradient_checkpointing(ckpt, wrap_classes=["Block"]) == helpers.LAYERS
    assert list(ckpt.state_dict()) == list(model.state_dict())
    ids = helpers.make_batches(1, 4)[0]
    helpers.lm_loss(model, ids).backward()
    helpers.lm_loss(ckpt, ids).backward()
    for (name, p), q in zip(model.named_parameters(), ckpt.parameters()):
        assert torch.equal(p.grad, q.grad), name


@pytest.mark.slow
def test_fsdp2_two_ranks_losses_match_single_process(two_rank: list[dict[str, Any]]) -> None:
    res = two_rank[0]
    assert res["num_fsdp_modules"] == helpers.LAYERS + 1  # each block + root
    assert res["fsdp_losses"] == pytest.approx(res["ref_losses"], rel=1e-5, abs=1e-6)
    assert two_rank[1]["fsdp_losses"] == res["fsdp_losses"]
    # Training moved the loss: the comparison is not between constants.
    assert len(set(res["ref_losses"])) == len(res["ref_losses"])


@pytest.mark.slow
def test_fsdp2_full_state_dict_gathers_trained_weights_on_rank0(two_rank: list[dict[str, Any]]) -> None:
    assert two_rank[0]["full_sd_keys_match"]
    assert two_rank[0]["full_sd_max_diff"] < 1e-4
    assert two_rank[1]["full_sd_len_nonzero_rank"] == 0  # cpu_offload=True: only rank 0 holds the copy


@pytest.mark.slow
def test_fsdp2_gradient_checkpointing_gives_same_grads(two_rank: list[dict[str, Any]]) -> None:
    for res in two_rank:
        assert res["ckpt_blocks_patched"] == helpers.LAYERS
        assert res["ckpt_grad_keys_match"]
        assert res["ckpt_grad_max_diff"] <= 1e-7


@pytest.mark.slow
def test_fsdp2_bf16_params_fp32_reduce_trains_close_to_fp32(two_rank: list[dict[str, Any]]) -> None:
    res = two_rank[0]
    assert res["bf16_sharded_param_dtype"] == "torch.float32"  # sharded master weights stay fp32
    assert res["bf16_losses"] == pytest.approx(res["ref_losses"], abs=2e-2)
    assert res["bf16_losses"] != res["fsdp_losses"]  # compute really ran in bf16


@pytest.mark.slow
def test_fsdp2_cpu_offload_policy_trains(two_rank: list[dict[str, Any]]) -> None:
    res = two_rank[0]
    assert res["cpu_offload_param_device"] == "cpu"
    assert res["cpu_offload_loss0"] == pytest.approx(res["ref_losses"][0], rel=1e-5)


@pytest.mark.slow
def test_fsdp2_offload_reload_is_bit_identical_and_training_continues(two_rank: list[dict[str, Any]]) -> None:
    for res in two_rank:
        assert res["fsdp_offload_moved"]
        assert res["fsdp_offload_bit_identical"]
        assert res["after_offload_max_diff"] < 1e-4
        fsdp_loss, ref_loss = res["after_offload_forward"]
        assert fsdp_loss == pytest.approx(ref_loss, rel=1e-5)


@pytest.mark.slow
def test_fsdp2_streamed_sync_gathers_tensor_by_tensor_to_an_outside_rollout(
    two_rank: list[dict[str, Any]],
) -> None:
    # the sender's update holds sharded tensors (nothing gathered up front); the rollout still gets every bit
    assert two_rank[0]["streamed_rollout_equals_actor"] is True
    assert two_rank[1]["streamed_rollout_equals_actor"] is None


@pytest.mark.slow
def test_fsdp2_sharded_checkpoint_resumes_identically(two_rank: list[dict[str, Any]]) -> None:
    for res in two_rank:
        assert res["ckpt_latest"].endswith("global_step_5") and res["ckpt_step"] == 5
        original, resumed = res["ckpt_resume_losses"]
        assert original == resumed
        assert res["ckpt_resume_params_equal"]
