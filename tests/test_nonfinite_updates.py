"""An update that leaves the weights unusable stops the run before they are saved or sampled with: NaN/inf in the
weights, or a NaN/inf loss on the update's last minibatch after earlier minibatches stepped (the loss of the weights
the update ends with). One line names the iteration and the non-finite tensor or loss terms (exit 1); no checkpoint
and no policy folder hold those weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from train_embodied.cli import train_main
from train_embodied.numerics import first_nonfinite_weight
from train_embodied.testing import PPO_TINY

pytestmark = pytest.mark.slow


def test_an_update_that_overflows_stops_the_run_before_any_save(tmp_path: Path, capsys) -> None:
    # lr 1e37: the first minibatch's Adam step moves every weight by ~1e37 (finite), after which every loss is NaN
    run = tmp_path / "run"
    code = train_main(
        [
            "metaworld_ppo_tiny_cpu",
            *PPO_TINY,
            "actor.optim.lr=1e37",
            "runner.max_epochs=2",
            "runner.save_interval=1",
            "runner.eval_before_train=false",
            f"runner.logger.log_dir={run}",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1, err
    assert err[0].startswith("vla-train: error: iteration 1: the weights after the update are unusable"), err
    assert "NaN/inf loss on the update's last minibatch (train/actor/policy_loss=nan" in err[0]
    assert "no complete checkpoint yet" in err[0]
    assert not (run / "checkpoints").exists() and not (run / "policy").exists()


def test_the_first_nonfinite_weight_is_named_with_its_count() -> None:
    from train_embodied.config import load_train_config
    from train_embodied.policy_io import model_config
    from vla_models import build_policy

    policy = build_policy(
        model_config(load_train_config("metaworld_ppo_tiny_cpu", [], check_paths=False).actor.model)
    )
    assert first_nonfinite_weight(policy) is None
    names = [name for name, _ in policy.named_parameters()]
    with torch.no_grad():
        params = dict(policy.named_parameters())
        params[names[3]].view(-1)[:2] = float("inf")
        params[names[5]].view(-1)[0] = float("nan")
    found = first_nonfinite_weight(policy)
    assert found == f"{names[3]} (2 of {params[names[3]].numel()} entries)"
