"""The actor update on a real tiny OpenVLA-OFT: critic warm-up, target-KL early stop, episode-mean weighting, the
KL penalty to a reference policy."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from train_embodied.batches import SampleBatch
from train_embodied.config.sections import AlgorithmSection, ModelSection, OptimSection
from train_embodied.policy_io import build_optimizer, build_policy_for_run, frozen_copy
from train_embodied.update import ppo_update
from vla_algos import episode_mean_weights

pytestmark = pytest.mark.usefixtures("one_thread")

N = 48


def _policy_and_batch(seed: int = 0, num_action_chunks: int = 1) -> tuple[torch.nn.Module, SampleBatch]:
    torch.manual_seed(seed)
    section = ModelSection(
        image_size=32,
        num_action_chunks=num_action_chunks,
        extra={"patch_size": 16, "hidden_size": 64, "detach_critic_input": True},
    )
    policy = build_policy_for_run(section, None)
    policy.eval()
    rng = np.random.default_rng(seed)
    obs = {
        "images": rng.integers(0, 255, size=(N, 32, 32, 3), dtype=np.uint8),
        "states": rng.normal(size=(N, 4)).astype(np.float32),
        "task_descriptions": ["close the drawer"] * N,
    }
    with torch.no_grad():
        out = policy.predict(obs, mode="sample")
    batch = SampleBatch(
        forward_inputs=out.forward_inputs,
        old_logprobs=out.logprobs,
        advantages=torch.randn(N, generator=torch.Generator().manual_seed(seed)),
        mask=torch.ones(N, dtype=torch.bool),
        action_mask=torch.ones(N, 1, dtype=torch.bool),
        old_values=out.values,
        returns=torch.rand(N),
    )
    return policy, batch


def _sizes(algo: AlgorithmSection, micro_batch_size: int = 8, global_batch_size: int = 16) -> dict:
    """`ppo_update`'s settings: the `algorithm` section, lr 1e-3, the batch sizes."""
    return {
        "algo": algo,
        "optim": OptimSection(lr=1e-3, value_lr=1e-3),
        "micro_batch_size": micro_batch_size,
        "global_batch_size": global_batch_size,
    }


def _settings(**kw) -> dict:
    return _sizes(AlgorithmSection(update_epoch=kw.pop("update_epoch", 2), **kw))


def _update(policy, batch, s: dict, **kw) -> tuple[dict, int]:
    opt = build_optimizer(policy, OptimSection(lr=1e-3, value_lr=1e-3))
    return ppo_update(
        policy,
        opt,
        batch,
        s["algo"],
        s["optim"],
        micro_batch_size=s["micro_batch_size"],
        global_batch_size=s["global_batch_size"],
        generator=torch.Generator().manual_seed(0),
        **kw,
    )


def _params(policy, value_head: bool) -> dict[str, torch.Tensor]:
    return {
        k: v.detach().clone()
        for k, v in policy.named_parameters()
        if ("value_head" in k) == value_head and v.requires_grad
    }


def test_critic_warmup_trains_only_the_value_head() -> None:
    policy, batch = _policy_and_batch()
    before_policy, before_value = _params(policy, False), _params(policy, True)
    metrics, steps = _update(policy, batch, _settings(), train_policy=False)
    assert steps == 2 * (N // 16) and metrics["train/actor/policy_trained"] == 0.0
    after_policy, after_value = _params(policy, False), _params(policy, True)
    assert all(torch.equal(before_policy[k], after_policy[k]) for k in before_policy)
    assert any(not torch.equal(before_value[k], after_value[k]) for k in before_value)
    # with the policy trained, its parameters move
    policy, batch = _policy_and_batch()
    before_policy = _params(policy, False)
    _update(policy, batch, _settings())
    assert any(not torch.equal(before_policy[k], v) for k, v in _params(policy, False).items())


def test_target_kl_stops_the_update_early() -> None:
    policy, batch = _policy_and_batch()
    full, full_steps = _update(policy, batch, _settings(update_epoch=4))
    assert full_steps == 4 * (N // 16) and full["train/actor/early_stopped"] == 0.0
    # the first minibatch sees ratio 1 (KL 0); the second sees the first step's change and stops the passes
    policy, batch = _policy_and_batch()
    stopped, steps = _update(policy, batch, _settings(update_epoch=4, target_kl=1e-9))
    assert steps == 2 < full_steps and stopped["train/actor/early_stopped"] == 1.0


def test_episode_mean_weights_give_every_episode_equal_weight() -> None:
    mask = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 0, 1], [1, 0, 1]], dtype=torch.bool)
    done = torch.tensor([[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 0], [0, 0, 1]], dtype=torch.bool)
    w = episode_mean_weights(mask, done)
    # episodes: col 0 rows 0-1 and rows 2-4, col 1 rows 0-2, col 2 rows 0-4
    totals = [w[0:2, 0].sum(), w[2:5, 0].sum(), w[0:3, 1].sum(), w[:, 2].sum()]
    assert torch.allclose(torch.stack(totals), totals[0].expand(4))
    assert torch.all(w[~mask] == 0) and torch.isclose(w[mask].mean(), torch.tensor(1.0))


@pytest.mark.parametrize("logprob_type", ["token_level", "action_level", "chunk_level"])
def test_seq_mean_token_mean_weighs_an_episode_ended_at_its_first_action_like_a_full_one(
    logprob_type: str,
) -> None:
    """`seq-mean-token-mean` through the trainer (advantages -> flattened batch -> update): env 0's episode ends at
    the first of the two actions of its first chunk, env 1's mid-rollout, the others run 8 full chunks. Each episode
    has its own constant advantage; at ratio 1 (the first minibatch) the policy loss is minus their plain mean."""
    from train_embodied.advantages import compute_advantages, flatten_for_update
    from train_embodied.rollout import RolloutBatch

    t, b, c = 8, 6, 2
    policy, flat = _policy_and_batch(num_action_chunks=c)
    terminated = torch.zeros(t, b, c, dtype=torch.bool)
    terminated[0, 0, 0] = True
    terminated[3, 1, 1] = True
    truncated = torch.zeros(t, b, c, dtype=torch.bool)
    truncated[-1, 2:, -1] = True
    loss_mask = torch.ones(t, b, dtype=torch.bool)
    loss_mask[1:, 0] = False
    loss_mask[4:, 1] = False
    rollout = RolloutBatch(
        forward_inputs={k: v.reshape(t, b, *v.shape[1:]) for k, v in flat.forward_inputs.items()},
        logprobs=flat.old_logprobs.reshape(t, b, *flat.old_logprobs.shape[1:]),
        values=flat.old_values.reshape(t, b),
        rewards=torch.zeros(t, b, c),
        terminated=terminated,
        truncated=truncated,
        final_values=torch.zeros(t, b),
        loss_mask=loss_mask,
        last_values=torch.zeros(b),
    )
    algo = AlgorithmSection(
        update_epoch=1,
        logprob_type=logprob_type,
        loss_agg_mode="seq-mean-token-mean",
        normalize_advantages=False,
    )
    adv = compute_advantages(rollout, algo)
    episode_adv = torch.tensor([3.0, -1.0, 1.0, -2.0, 0.5, -0.25])
    adv.advantages = episode_adv[None, :].expand(t, b).clone()
    batch = flatten_for_update(rollout, adv)
    metrics, _ = _update(policy, batch, _sizes(algo, 16, N))
    assert metrics["train/actor/policy_loss"] == pytest.approx(-float(episode_adv.mean()), abs=1e-4)


def test_uniform_sample_weights_change_nothing() -> None:
    policy, batch = _policy_and_batch()
    plain, _ = _update(policy, batch, _settings())
    policy, batch = _policy_and_batch()
    weighted, _ = _update(policy, dataclasses.replace(batch, sample_weight=torch.ones(N)), _settings())
    assert weighted["train/actor/policy_loss"] == pytest.approx(plain["train/actor/policy_loss"], rel=1e-5)
    # non-uniform weights change the loss
    policy, batch = _policy_and_batch()
    w = torch.linspace(0.1, 1.9, N)
    other, _ = _update(policy, dataclasses.replace(batch, sample_weight=w), _settings())
    assert other["train/actor/policy_loss"] != pytest.approx(plain["train/actor/policy_loss"], rel=1e-3)


@pytest.mark.parametrize("weighted", [True, False], ids=["seq-mean-token-mean", "token-mean"])
@pytest.mark.parametrize("logprob_type", ["token_level", "action_level", "chunk_level"])
def test_loss_does_not_depend_on_the_micro_batch_split(logprob_type: str, weighted: bool) -> None:
    """Both aggregations are (weighted) means over the minibatch: one sample per micro-batch (or per rank) must give
    the same loss and gradient as the whole minibatch in one pass (masked_mean renormalises inside a micro-batch).
    Two actions per chunk, action-level advantages [N, C] and some unexecuted actions (action_mask False)."""
    g = torch.Generator().manual_seed(1)
    w = torch.linspace(0.1, 1.9, N)[torch.randperm(N, generator=g)]
    action_mask = torch.ones(N, 2, dtype=torch.bool)
    action_mask[: N // 3, 1] = False  # episodes that ended after the chunk's first action
    algo = AlgorithmSection(update_epoch=1, logprob_type=logprob_type, kl_beta=0.5)
    results = {}
    for micro in (16, 1):
        policy, batch = _policy_and_batch(num_action_chunks=2)
        reference = frozen_copy(policy)  # equal to the policy on the first minibatch only
        batch = dataclasses.replace(
            batch,
            sample_weight=w if weighted else None,
            action_mask=action_mask,
            advantages=torch.randn(N, 2, generator=torch.Generator().manual_seed(2)) * action_mask,
        )
        results[micro], _ = _update(policy, batch, _sizes(algo, micro, 16), reference=reference)
    assert results[16]["train/actor/kl_loss"] > 0
    for key in (
        "train/actor/policy_loss",
        "train/actor/kl_loss",
        "train/actor/grad_norm",
        "train/actor/approx_kl",
        "train/entropy_loss",
    ):
        assert results[1][key] == pytest.approx(results[16][key], rel=1e-4, abs=1e-7), key


@pytest.mark.parametrize("logprob_type", ["token_level", "chunk_level"])
def test_micro_batch_gradients_add_up_to_the_whole_minibatchs(logprob_type: str, monkeypatch) -> None:
    """One minibatch of 16 samples in micro-batches of 1, 2 and 16: each micro-batch's loss is
    `sum(w * loss) / minibatch weight sum`, so the accumulated gradients (policy, entropy, KL and critic terms;
    episode weights and unexecuted actions) equal the whole minibatch's within 1e-6, and its weight sums are computed
    once per minibatch, however many micro-batches it has."""
    import copy

    from train_embodied import update

    g = torch.Generator().manual_seed(3)
    action_mask = torch.ones(N, 2, dtype=torch.bool)
    action_mask[: N // 3, 1] = False
    algo = AlgorithmSection(update_epoch=1, logprob_type=logprob_type, kl_beta=0.5, entropy_bonus=0.1)
    policy, batch = _policy_and_batch(num_action_chunks=2)
    policy.double()  # float64 weights: batched matmuls of other sizes round alike to well under 1e-6
    batch = dataclasses.replace(
        batch,
        sample_weight=torch.linspace(0.1, 1.9, N)[torch.randperm(N, generator=g)],
        action_mask=action_mask,
        advantages=torch.randn(N, 2, generator=g) * action_mask,
    )
    minibatch = torch.randperm(N, generator=g)[:16]
    mask = torch.zeros(N, dtype=torch.bool)
    mask[minibatch] = True  # the update's one minibatch: these 16 samples
    batch = dataclasses.replace(batch, mask=mask)
    with torch.no_grad():  # a reference away from the policy, so the KL term has a gradient
        reference = frozen_copy(policy)
        for p in reference.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=g))
    calls = []
    weight_sums = update.minibatch_weight_sums
    monkeypatch.setattr(
        update, "minibatch_weight_sums", lambda *a, **k: calls.append(1) or weight_sums(*a, **k)
    )
    optim = OptimSection(lr=1e-3, value_lr=1e-3, clip_grad=0.0)  # no clipping: the gradients as accumulated
    grads = {}
    for micro in (1, 2, 16):
        trained = copy.deepcopy(policy)
        before = len(calls)
        metrics, steps = ppo_update(
            trained,
            build_optimizer(trained, optim),
            batch,
            algo,
            optim,
            micro_batch_size=micro,
            global_batch_size=16,
            generator=torch.Generator().manual_seed(0),
            reference=reference,
        )
        assert steps == 1 and len(calls) == before + 1  # once per minibatch: not per micro-batch
        assert metrics["train/actor/kl_loss"] > 0 and metrics["train/critic/value_loss"] > 0
        grads[micro] = {k: p.grad.clone() for k, p in trained.named_parameters() if p.grad is not None}
    assert grads[16] and any(float(v.abs().max()) > 0 for v in grads[16].values())
    for micro in (1, 2):
        assert grads[micro].keys() == grads[16].keys()
        for k, v in grads[16].items():
            torch.testing.assert_close(grads[micro][k], v, atol=1e-6, rtol=0, msg=f"{micro}: {k}")


def test_weight_sums_and_metric_sums_once_per_minibatch(monkeypatch) -> None:
    """`ppo_update` computes each minibatch's weight sums once (from the whole rollout's loss weights, which every
    rank holds: no collective) and reduces its metrics over the ranks once: 3 minibatches of 16 in 48 micro-batches
    make 3 of each."""
    from train_embodied import update

    counts = {"minibatch_weight_sums": 0, "all_reduce_sums": 0}
    for name in counts:
        original = getattr(update, name)

        def counted(*a, _original=original, _name=name, **k):
            counts[_name] += 1
            return _original(*a, **k)

        monkeypatch.setattr(update, name, counted)
    policy, batch = _policy_and_batch()
    algo = AlgorithmSection(update_epoch=1)
    _, steps = _update(policy, batch, _sizes(algo, 1, 16))
    assert steps == 3 and counts == {"minibatch_weight_sums": 3, "all_reduce_sums": 3}


def _warmup_actor():
    """An ActorWorker with a 10-step lr warmup; each update of `_policy_and_batch()`'s batch takes 6 steps."""
    from train_embodied.workers import ActorWorker

    section = ModelSection(
        image_size=32, extra={"patch_size": 16, "hidden_size": 64, "detach_critic_input": True}
    )
    return ActorWorker(
        section,
        {"action_dim": 4},
        OptimSection(lr=1e-3, value_lr=1e-3, lr_warmup_steps=10),
        AlgorithmSection(update_epoch=2),
        micro_batch_size=8,
        global_batch_size=16,
        seed=0,
    )


def test_lr_warmup_continues_across_rollouts() -> None:
    """The actor passes its step count: a second rollout's update continues the warmup instead of restarting it."""
    _, batch = _policy_and_batch()
    actor = _warmup_actor()
    first = actor.train(batch, seed=1)  # steps 0-5: lr 1e-4 ... 6e-4
    second = actor.train(batch, seed=2)  # steps 6-11: reaches the full lr at step 9
    assert actor.optimizer_steps() == 12
    assert first["train/actor/lr"] == pytest.approx(6e-4)
    assert second["train/actor/lr"] == pytest.approx(1e-3)


def test_lr_warmup_waits_for_the_policy_during_critic_warmup() -> None:
    """Critic-only iterations run at the full lr and do not spend the warmup: the policy's first step is small."""
    _, batch = _policy_and_batch()
    actor = _warmup_actor()
    critic_only = actor.train(batch, seed=1, train_policy=False)  # 6 steps at the full lr
    assert critic_only["train/actor/lr"] == pytest.approx(1e-3)
    first_policy = actor.train(batch, seed=2)  # policy steps 0-5: the warmup starts here
    assert actor.optimizer_steps() == 12 and actor.policy_step == 6
    assert first_policy["train/actor/lr"] == pytest.approx(6e-4)


def test_lr_decay_scale_shapes() -> None:
    """constant: 1; linear / cosine: 1 at the first iteration, falling towards min_lr / lr, which the last
    iteration does not reach (it still trains)."""
    from train_embodied.update import lr_decay_scale

    assert [lr_decay_scale("constant", i, 4) for i in range(4)] == [1.0] * 4
    assert [lr_decay_scale("linear", i, 4) for i in range(4)] == pytest.approx([1.0, 0.75, 0.5, 0.25])
    assert [lr_decay_scale("linear", i, 4, 0.2) for i in range(4)] == pytest.approx([1.0, 0.8, 0.6, 0.4])
    cosine = [lr_decay_scale("cosine", i, 4, 0.1) for i in range(4)]
    assert cosine[0] == 1.0 and cosine[2] == pytest.approx(0.55)
    assert cosine == sorted(cosine, reverse=True) and cosine[-1] > 0.1
    with pytest.raises(ValueError, match="lr_decay_style='step'"):
        lr_decay_scale("step", 1, 4)


def test_lr_decay_scales_every_group_on_top_of_the_warmup() -> None:
    """The iteration's decay factor multiplies the warmed-up lr of the policy and of the value head alike."""
    _, batch = _policy_and_batch()
    actor = _warmup_actor()
    first = actor.train(batch, seed=1, lr_scale=0.5)  # warmup step 5 of 10: 6e-4, halved
    assert first["train/actor/lr"] == pytest.approx(3e-4)
    actor.train(batch, seed=2, lr_scale=0.25)  # past the warmup: 1e-3 x 0.25 for both groups
    assert [g["lr"] for g in actor.optimizer.param_groups] == pytest.approx([2.5e-4, 2.5e-4])
    assert [g["base_lr"] for g in actor.optimizer.param_groups] == pytest.approx([1e-3, 1e-3])


def _mean_kl_to(policy, reference, batch: SampleBatch) -> float:
    """Mean per-token k3 estimate of KL(policy || reference) on the batch's observations and actions."""
    from vla_algos import kl_penalty

    with torch.no_grad():
        lp = policy.evaluate(batch.forward_inputs, compute_values=False)[0]
        ref = reference.evaluate(batch.forward_inputs, compute_values=False)[0]
    return float(kl_penalty(lp.float(), ref.float(), "k3").mean())


def test_kl_penalty_keeps_the_policy_near_its_starting_weights() -> None:
    """`algorithm.kl_beta` through the actor worker: the same updates move the policy much less far from its
    starting weights (the frozen reference) than without the penalty, and report `train/actor/kl_loss`."""
    from train_embodied.workers import ActorWorker

    _, batch = _policy_and_batch()
    section = ModelSection(
        image_size=32, extra={"patch_size": 16, "hidden_size": 64, "detach_critic_input": True}
    )
    actors = {
        beta: ActorWorker(
            section,
            {"action_dim": 4},
            OptimSection(lr=1e-3, value_lr=1e-3),
            AlgorithmSection(update_epoch=2, kl_beta=beta, kl_penalty="k2"),
            micro_batch_size=8,
            global_batch_size=16,
            seed=0,
        )
        for beta in (0.0, 5.0)
    }
    start = actors[5.0].reference
    assert actors[0.0].reference is None
    assert all(not p.requires_grad for p in start.parameters())
    for seed in range(3):
        metrics = {beta: actor.train(batch, seed=seed) for beta, actor in actors.items()}
    assert "train/actor/kl_loss" not in metrics[0.0]
    assert metrics[5.0]["train/actor/kl_loss"] > 0
    free = _mean_kl_to(actors[0.0].policy, start, batch)
    held = _mean_kl_to(actors[5.0].policy, start, batch)
    assert held < 0.5 * free, (held, free)
    with pytest.raises(ValueError, match=r"kl_beta=5\.0 needs the reference policy"):
        _update(actors[5.0].policy, batch, _sizes(actors[5.0].algorithm))


def test_config_offers_every_kl_estimator_of_vla_algos() -> None:
    from train_embodied.config.sections import KL_PENALTIES
    from vla_algos import KL_KINDS

    assert KL_PENALTIES == KL_KINDS


def test_the_update_runs_on_the_training_threads_and_gives_the_rest_back() -> None:
    """`actor.torch_num_threads`: the actor's forward passes inside an update see that many intra-op threads; the
    process (on the local backend: the rollout's) gets its own count back afterwards, also after a failed update."""
    from train_embodied.workers import ActorWorker

    _, batch = _policy_and_batch()
    before = torch.get_num_threads()
    actor = ActorWorker(
        ModelSection(image_size=32, extra={"patch_size": 16, "hidden_size": 64}),
        {"action_dim": 4},
        OptimSection(lr=1e-3),
        AlgorithmSection(update_epoch=1),
        micro_batch_size=8,
        global_batch_size=16,
        seed=0,
        num_threads=1,
        training_threads=2,
    )
    seen: list[int] = []
    for module in actor.policy.modules():  # `evaluate` calls the submodules, not the policy's own forward
        module.register_forward_pre_hook(lambda *_: seen.append(torch.get_num_threads()))
    try:
        assert torch.get_num_threads() == 1
        actor.train(batch, seed=1)
        assert seen and set(seen) == {2} and torch.get_num_threads() == 1
        seen.clear()
        with pytest.raises(KeyError):
            actor.train(dataclasses.replace(batch, forward_inputs={}), seed=2)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_actor_torch_num_threads_defaults_to_the_runners_and_is_checked() -> None:
    from train_embodied.config import ConfigError, load_train_config

    def load(*overrides: str):
        return load_train_config("metaworld_ppo_tiny_cpu", list(overrides), check_paths=False)

    tc = load()
    assert (tc.actor.torch_num_threads, tc.runner.torch_num_threads, tc.training_threads) == (2, 1, 2)
    assert load("actor.torch_num_threads=0", "runner.torch_num_threads=3").training_threads == 3
    with pytest.raises(ConfigError, match=r"actor.torch_num_threads=-1"):
        load("actor.torch_num_threads=-1")
