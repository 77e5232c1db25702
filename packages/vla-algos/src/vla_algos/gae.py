"""Generalized advantage estimation (Schulman et al. 2016, arXiv:1506.02438) with explicit termination.

Semantics are those of TorchRL's ``torchrl.objectives.value.functional.generalized_advantage_estimate``::

    delta[t] = rewards[t] + gamma * (1 - terminated[t]) * next_values[t] - values[t]
    A[t]     = delta[t] + gamma * lam * (1 - done[t]) * A[t + 1]          (A[T] = 0)
    returns  = A + values

``terminated`` cuts the *bootstrap* (the episode really ended, the next state has no value) while ``done``
(= terminated or truncated) cuts the *trace* (the next row belongs to another episode after an auto-reset).
A truncated step therefore still bootstraps from ``next_values[t]``, the value of its final observation.

Two implementations, tested equal: :func:`compute_gae_loop` is the readable reference; :func:`compute_gae` is
the fast one (a blocked reverse scan, see ``_blocked_reverse_scan``).
"""

from __future__ import annotations

import math

import torch

from vla_algos._checks import check_bool, check_finite, check_float, check_same_shape, check_unit_interval


def _validate_gae_inputs(
    fn: str,
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    done: torch.Tensor,
    gamma: float,
    lam: float,
    check_finite_values: bool,
) -> None:
    check_float(fn, "rewards", rewards)
    if rewards.ndim < 1:
        raise ValueError(f"{fn}: `rewards` must have shape [T, *batch], got a 0-d tensor")
    check_same_shape(
        fn, "rewards", rewards, values=values, next_values=next_values, terminated=terminated, done=done
    )
    for name, x in (("values", values), ("next_values", next_values)):
        check_float(fn, name, x)
        if x.dtype != rewards.dtype:
            raise TypeError(f"{fn}: `{name}` has dtype {x.dtype} but `rewards` has dtype {rewards.dtype}")
    check_bool(fn, "terminated", terminated)
    check_bool(fn, "done", done)
    if bool((terminated & ~done).any()):  # else the trace would run on into the next episode
        bad = tuple(int(i) for i in (terminated & ~done).nonzero()[0])
        raise ValueError(
            f"{fn}: `terminated` is True where `done` is False (first at index {bad}); "
            "`done` must be `terminated | truncated`"
        )
    check_unit_interval(fn, "gamma", gamma)
    check_unit_interval(fn, "lam", lam)
    if check_finite_values:
        check_finite(fn, rewards=rewards, values=values, next_values=next_values)


def compute_gae_loop(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    done: torch.Tensor,
    *,
    gamma: float,
    lam: float,
    check_finite: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference GAE: a plain reverse loop over time, vectorised over the batch.

    Same contract as :func:`compute_gae`; kept short so that it can be read against the paper and against
    TorchRL's loop. Differentiable with respect to ``rewards``/``values``/``next_values``.
    """
    _validate_gae_inputs(
        "compute_gae_loop", rewards, values, next_values, terminated, done, gamma, lam, check_finite
    )
    advantages = torch.zeros_like(rewards)
    next_advantage = torch.zeros_like(rewards[0])
    for t in reversed(range(rewards.shape[0])):
        not_terminated = (~terminated[t]).to(rewards.dtype)
        not_done = (~done[t]).to(rewards.dtype)
        delta = rewards[t] + gamma * not_terminated * next_values[t] - values[t]
        next_advantage = delta + gamma * lam * not_done * next_advantage
        advantages[t] = next_advantage
    return advantages, advantages + values


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    done: torch.Tensor,
    *,
    gamma: float,
    lam: float,
    block_size: int | None = None,
    check_finite: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimates and value targets, time-major.

    Args:
        rewards: ``[T, *B]`` float, reward of step ``t``.
        values: ``[T, *B]``, ``V(s_t)`` of the state the action of step ``t`` was taken in.
        next_values: ``[T, *B]``, ``V`` of the state after step ``t``; for an episode that ended at ``t``, the
            value of its *final* observation (not of the auto-reset observation).
        terminated: ``[T, *B]`` bool, the episode reached a terminal state at step ``t`` (no bootstrap).
        done: ``[T, *B]`` bool, ``terminated | truncated``: the episode ended at step ``t`` for any reason
            (the trace stops; row ``t + 1`` belongs to the next episode). Must be True wherever
            ``terminated`` is.
        gamma: discount in [0, 1].
        lam: GAE lambda in [0, 1] (0: one-step TD error, 1: Monte-Carlo return minus ``values``).
        block_size: time steps per block of the blocked scan (default: about ``sqrt(T)``, larger for wide
            batches); results do not depend on it beyond float rounding.
        check_finite: raise ``ValueError`` if ``rewards``/``values``/``next_values`` hold NaN or infinity.

    Returns:
        ``(advantages, returns)``, both ``[T, *B]`` with the dtype of ``rewards``, detached from autograd;
        ``returns = advantages + values``.

    Raises:
        TypeError: a non-tensor, non-float values/rewards, mixed float dtypes, or non-bool flags.
        ValueError: shapes that differ, ``terminated`` True where ``done`` is False, ``gamma``/``lam``/
            ``block_size`` out of range, non-finite input when ``check_finite``.
    """
    _validate_gae_inputs(
        "compute_gae", rewards, values, next_values, terminated, done, gamma, lam, check_finite
    )
    if block_size is not None and (
        not isinstance(block_size, int) or isinstance(block_size, bool) or block_size < 1
    ):
        raise ValueError(f"compute_gae: `block_size` must be a positive int or None, got {block_size!r}")
    shape = rewards.shape
    num_steps = shape[0]
    if (
        rewards.numel() == 0
    ):  # zero steps (or zero envs): nothing to estimate, empty results of the same shape
        return torch.zeros_like(rewards), torch.zeros_like(rewards)

    def flat(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(num_steps, -1).contiguous()

    with torch.no_grad():
        advantages = _blocked_gae(
            flat(rewards),
            flat(values),
            flat(next_values),
            flat(terminated),
            flat(done),
            gamma=float(gamma),
            gamma_lam=float(gamma) * float(lam),
            block_size=block_size,
        )
        advantages = advantages.view(shape)
        returns = advantages + values
    return advantages, returns


def _td_errors(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    *,
    gamma: float,
    out: torch.Tensor,
) -> None:
    """``out = rewards + gamma * next_values * ~terminated - values`` (three elementwise passes).

    ``where`` rather than a multiply, so that a non-finite value of a terminal state cannot leak in (and
    rather than ``masked_fill``, which measured slower on CPU).
    """
    zero = torch.zeros((), dtype=rewards.dtype, device=rewards.device)
    torch.add(rewards, torch.where(terminated, zero, next_values), alpha=gamma, out=out)
    out.sub_(values)


def _trace_discounts(done: torch.Tensor, *, gamma_lam: float, out: torch.Tensor) -> None:
    """``out = gamma * lam * ~done`` in one pass."""
    zero = torch.zeros((), dtype=out.dtype, device=out.device)
    torch.where(done, zero, torch.full((), gamma_lam, dtype=out.dtype, device=out.device), out=out)


# PyTorch runs an elementwise op on several threads only from this many elements on (at::internal::GRAIN_SIZE).
_PARALLEL_GRAIN = 32768


def _default_block_size(num_steps: int, batch: int) -> int:
    """``K`` with ``n = T // K`` blocks: ``n ~ sqrt(T)`` (fewest dependent ops), but few enough that one
    in-block op (``n * B`` elements) stays single-threaded. Dozens of small multi-threaded ops measured
    far slower than one thread on a CPU shared with other jobs: each parallel region waits (spinning)
    for a descheduled worker thread. The few full-size passes stay multi-threaded.
    """
    num_blocks = max(1, min(math.isqrt(num_steps), (_PARALLEL_GRAIN - 1) // max(batch, 1)))
    return max(1, num_steps // num_blocks)


def _blocked_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    done: torch.Tensor,
    *,
    gamma: float,
    gamma_lam: float,
    block_size: int | None,
) -> torch.Tensor:
    """Solve ``A[t] = delta[t] + c[t] * A[t + 1]`` for ``[T, B]`` inputs with a two-level (blocked) scan.

    A step-by-step loop issues ``T`` dependent kernels of size ``B``: each too small to amortise the
    per-call overhead or to use several threads, so it is overhead-bound unless ``B`` is huge. Here time
    is cut into ``n`` blocks of ``K`` steps (``K ~ sqrt(T)`` for small ``B``, see ``_default_block_size``), so
    only ``~2K + n`` dependent kernels:

    1. inside every block at once (``K`` vector ops of size ``n * B``), the local solution with a zero
       carry and the discount product to the block's end ``P[t] = c[t] * ... * c[end]``;
    2. across blocks (``n`` ops of size ``B``), the carries: the advantage at each block's first step;
    3. one fused pass: ``A[t] = local[t] + P[t] * carry(block of t)``.

    This is exact algebra (products of discounts in [0, 1], no division, so no loss of precision as with a
    cumprod/cumsum formulation, which must divide by vanishing products). Blocks are stored step-major
    (``[K, n, B]``) so that each vector op reads contiguous memory; the rows past ``n * K`` (fewer than ``K``)
    are solved first with a plain loop, as they come last in time.
    """
    num_steps, batch = rewards.shape
    advantages = torch.empty_like(rewards)
    if num_steps == 0 or batch == 0:
        return advantages
    block = min(block_size or _default_block_size(num_steps, batch), num_steps)
    num_blocks = num_steps // block
    split = num_blocks * block

    # Trailing rows [split, T): a plain reverse loop (fewer than `block` rows).
    carry_in = torch.zeros(batch, dtype=rewards.dtype, device=rewards.device)
    if split < num_steps:
        tail = advantages[split:]
        _td_errors(
            rewards[split:], values[split:], next_values[split:], terminated[split:], gamma=gamma, out=tail
        )
        tail_discounts = torch.empty_like(tail)
        _trace_discounts(done[split:], gamma_lam=gamma_lam, out=tail_discounts)
        rows, discounts = tail.unbind(0), tail_discounts.unbind(0)
        for t in range(len(rows) - 2, -1, -1):
            rows[t].addcmul_(discounts[t], rows[t + 1])
        carry_in = rows[0]

    def blocks(x: torch.Tensor) -> torch.Tensor:  # [split, B] -> [n, K, B] view (time = j * K + k)
        return x[:split].view(num_blocks, block, batch)

    # Step-major storage [K, n, B]: local[k, j] belongs to time j * K + k.
    local = rewards.new_empty(block, num_blocks, batch)
    products = rewards.new_empty(block, num_blocks, batch)
    _td_errors(
        blocks(rewards),
        blocks(values),
        blocks(next_values),
        blocks(terminated),
        gamma=gamma,
        out=local.transpose(0, 1),
    )
    _trace_discounts(blocks(done), gamma_lam=gamma_lam, out=products.transpose(0, 1))
    local_rows, product_rows = local.unbind(0), products.unbind(0)
    for k in range(block - 2, -1, -1):
        local_rows[k].addcmul_(product_rows[k], local_rows[k + 1])  # uses c[k] before it becomes P[k]
        product_rows[k].mul_(product_rows[k + 1])

    # carries[j] = advantage at the first step after block j.
    carries = rewards.new_empty(num_blocks, batch)
    carries[num_blocks - 1] = carry_in
    carry_rows = carries.unbind(0)
    first_local, first_product = local_rows[0].unbind(0), product_rows[0].unbind(0)
    for j in range(num_blocks - 2, -1, -1):
        torch.addcmul(first_local[j + 1], first_product[j + 1], carry_rows[j + 1], out=carry_rows[j])

    torch.addcmul(local, products, carries, out=blocks(advantages).transpose(0, 1))
    return advantages
