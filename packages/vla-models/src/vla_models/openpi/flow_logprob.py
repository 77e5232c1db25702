"""Log-probabilities of a flow-matching denoising chain (pure tensor functions).

Convention (openpi): ``x_t = t * noise + (1 - t) * action``; t = 1 is noise, t = 0 is data; the velocity
``v = noise - action``. The chain runs ``x_0 = noise`` (at t = 1) through K steps to ``x_K`` (t = 0) on the grid
``timesteps(K) = [1, 1 - 1/K, ..., 1/K, 0]``. Step i at ``t = ts[i]`` with ``delta = ts[i] - ts[i+1]`` predicts
``x0_hat = x - v t`` (data) and ``x1_hat = x + v (1 - t)`` (noise) and draws ``x' ~ N(w0 x0_hat + w1 x1_hat, std^2)``
with the weights of each noise method (the reference framework's ``flow_ode``, ``flow_sde``, ``flow_cps``,
``flow_noise``):

==========  ===============  ===================================  =========================
method      w0               w1                                   std
==========  ===============  ===================================  =========================
flow_ode    1 - (t - delta)  t - delta                            0 (Euler: x - delta v)
flow_sde    1 - (t - delta)  t - delta - sigma^2 delta / (2 t)    sqrt(delta) sigma
flow_cps    1 - (t - delta)  (t - delta) cos(pi nl / 2)           (t - delta) sin(pi nl / 2)
flow_noise  1 - (t - delta)  t - delta                            a learned std (noise head)
==========  ===============  ===================================  =========================

with ``sigma = nl * sqrt(t / (1 - t))`` (``t = 1`` replaced by ``ts[1]`` in the denominator) and ``nl`` the noise
level. A zero std is a deterministic step whose log-density counts as 0.
"""

from __future__ import annotations

import math

import torch

LOG_2PI = math.log(2 * math.pi)


def timesteps(num_steps: int, *, device: torch.device | str | None = None) -> torch.Tensor:
    """``[1, 1 - 1/K, ..., 1/K, 0]`` float32 ``[K + 1]``."""
    ts = torch.linspace(1.0, 1.0 / num_steps, num_steps, device=device)
    return torch.cat([ts, torch.zeros(1, device=device)])


def sde_sigma(ts: torch.Tensor, step: torch.Tensor, noise_level: torch.Tensor) -> torch.Tensor:
    """flow_sde's ``sigma`` at integer steps ``step`` ``[N]`` with per-row ``noise_level`` ``[N]``."""
    denom_t = torch.where(ts == 1, ts[1], ts)
    base = torch.sqrt(ts / (1 - denom_t))
    return noise_level * base[step]


def step_mean_std(
    method: str,
    x: torch.Tensor,
    v: torch.Tensor,
    t: torch.Tensor,
    delta: torch.Tensor,
    *,
    sigma: torch.Tensor | None = None,
    noise_level: torch.Tensor | None = None,
    noise_std: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and std of one denoising step.

    Args:
        method: a noise method (see the module docstring).
        x, v: current point and velocity ``[N, H, D]``.
        t, delta: per-row time and step size ``[N]``.
        sigma: flow_sde's per-row sigma ``[N]``.
        noise_level: flow_cps's per-row noise level ``[N]``.
        noise_std: flow_noise's learned std ``[N, H, D]``.

    Returns:
        ``(mean, std)`` broadcastable to ``[N, H, D]``.
    """
    t3, d3 = t[:, None, None], delta[:, None, None]
    zero = torch.zeros_like(t3)
    if method == "flow_ode":  # w0 x0_hat + w1 x1_hat with w1 = t - delta, written as the Euler step it equals
        return x - d3 * v, zero
    if method == "flow_sde":
        s3 = sigma[:, None, None]
        w1 = t3 - d3 - s3**2 * d3 / (2 * t3)
        std = torch.sqrt(d3) * s3
    elif method == "flow_cps":
        nl = noise_level[:, None, None]
        w1 = (t3 - d3) * torch.cos(math.pi * nl / 2)
        std = (t3 - d3) * torch.sin(math.pi * nl / 2)
    elif method == "flow_noise":
        w1, std = t3 - d3, noise_std
    else:
        raise ValueError(f"noise_method={method!r} is not supported")
    x0_hat = x - v * t3
    x1_hat = x + v * (1 - t3)
    w0 = 1 - (t3 - d3)
    return w0 * x0_hat + w1 * x1_hat, std


def gaussian_logprob(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Elementwise ``log N(x; mean, std^2)``; 0 where ``std == 0`` (a deterministic step)."""
    std = torch.broadcast_to(std, x.shape)
    pos = std > 0
    safe = torch.where(pos, std, torch.ones_like(std))
    lp = -((x - mean) ** 2) / (2 * safe**2) - torch.log(safe) - 0.5 * LOG_2PI
    return torch.where(pos, lp, torch.zeros_like(lp))


def gaussian_entropy(std: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """Elementwise ``0.5 log(2 pi e std^2)``; 0 where ``std == 0``."""
    std = torch.broadcast_to(std, shape)
    pos = std > 0
    safe = torch.where(pos, std, torch.ones_like(std))
    ent = 0.5 * (LOG_2PI + 1) + torch.log(safe)
    return torch.where(pos, ent, torch.zeros_like(ent))


def noise_std_from_logvar(
    h: torch.Tensor, logvar_min: torch.Tensor | float, logvar_max: torch.Tensor | float
) -> torch.Tensor:
    """flow_noise: the noise head's raw output ``h`` -> std: the log-variance squashed into
    ``[logvar_min, logvar_max]`` by ``tanh``, then ``exp(logvar / 2)``."""
    logvar = logvar_min + (logvar_max - logvar_min) * (torch.tanh(h) + 1) / 2
    return torch.exp(0.5 * logvar)
