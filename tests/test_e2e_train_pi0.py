"""End to end on the CPU with a tiny pi0 (flow matching): vla-sft warm start, then PPO iterations on real
MetaWorld from that folder with flow_sde and flow_noise; the actor recomputes the rollout's chunk log-probs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from train_embodied.testing import PPO_TINY, read_metrics, run_train

pytestmark = pytest.mark.slow
pytest.importorskip("metaworld", reason="runs real MetaWorld (vla-envs[metaworld])")

CONFIG = "metaworld_ppo_pi0_tiny_cpu"


@pytest.fixture(scope="module")
def sft_policy(tmp_path_factory) -> Path:
    from train_embodied.cli import sft_main

    out = tmp_path_factory.mktemp("pi0_sft")
    argv = [CONFIG, *PPO_TINY, "sft.num_demos=2", "sft.steps=3", "sft.batch_size=8", f"sft.output_dir={out}"]
    assert sft_main(argv) == 0
    info = json.loads((out / "sft_summary.json").read_text())
    assert info["sft_steps"] == 3 and math.isfinite(info["final_loss"])
    return out / "policy"


@pytest.mark.parametrize("method", ["flow_sde", "flow_noise"])
def test_ppo_from_the_warm_start(sft_policy: Path, tmp_path: Path, method: str) -> None:
    overrides = [*PPO_TINY, "runner.max_epochs=2", f"actor.model.model_path={sft_policy}"]
    overrides += [f"actor.model.openpi.noise_method={method}", "runner.eval_greedy=true"]
    if method == "flow_noise":
        overrides.append("actor.model.openpi.joint_logprob=true")
    summary = run_train(CONFIG, overrides, tmp_path / "run")
    assert summary["epochs"] == 2
    for key in (
        "success_before_rl",
        "success_after_rl",
        "success_before_rl_greedy",
        "success_after_rl_greedy",
    ):
        assert 0.0 <= summary[key] <= 1.0
    rows = [r for r in read_metrics(tmp_path / "run") if "train/actor/policy_loss" in r]
    assert len(rows) == 2
    # predict scores the chain with evaluate's code: the first minibatch's ratio is 1
    assert rows[0]["train/actor/first_minibatch_approx_kl"] < 1e-6
    assert math.isfinite(rows[1]["train/critic/value_loss"])
    saved = json.loads((tmp_path / "run" / "policy" / "config.json").read_text())["vla_models"]
    assert saved["family"] == "openpi" and saved["noise_method"] == method


def test_lora_policy_with_an_annealed_noise_level(sft_policy: Path, tmp_path: Path) -> None:
    """LoRA (`is_lora`) on the warm start trains and is exported merged. `noise_anneal`: the rollout samples with the level of the current iteration (0.9, then 0.1 from the
    second on), and the actor recomputes each row's density with the level stored for it: flow_sde's
    per-dimension entropy, 0.5 * log(2 pi e sigma^2) with sigma proportional to the level, drops by
    log(0.9 / 0.1) = 2.2 between the two iterations, give or take the rows' different scored steps (each step
    has its own sigma; a run at a constant level moves by well under 1)."""
    overrides = [*PPO_TINY, "runner.max_epochs=2", f"actor.model.model_path={sft_policy}"]
    overrides += ["+actor.model.openpi.noise_anneal=true", "+actor.model.openpi.noise_params=[0.9,0.1,1]"]
    overrides += ["actor.model.is_lora=true", "actor.model.lora_rank=4"]
    summary = run_train(CONFIG, overrides, tmp_path / "run")
    from safetensors import safe_open

    with safe_open(str(Path(summary["checkpoint"]) / "model.safetensors"), "pt") as f:
        assert any(".lora_A" in k for k in f.keys())  # noqa: SIM118 (safe_open is not iterable)
    saved = json.loads((tmp_path / "run" / "policy" / "config.json").read_text())["vla_models"]
    assert saved["is_lora"] is False  # merged on export
    rows = [r for r in read_metrics(tmp_path / "run") if "train/actor/entropy_loss" in r]
    assert len(rows) == 2
    first, second = rows[0]["train/actor/entropy_loss"], rows[1]["train/actor/entropy_loss"]
    assert 1.5 < first - second < 3.0, (first, second)
    assert rows[1]["train/actor/first_minibatch_approx_kl"] < 1e-6
