"""Random draws of a policy's sampling, from one generator for the batch or from one generator per row.

With one generator per row (`Sequence[torch.Generator]`, one per batch row) a row's draws depend only on its own
generator, not on which other rows share its batch: a batch split over several rollout processes samples what
one process would sample for the same rows (given per-row generators keyed by a row id).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

#: One generator for the whole batch, one per row, or None (torch's default generator).
Generators = torch.Generator | Sequence[torch.Generator] | None


def _per_row(generator: Generators, rows: int) -> Sequence[torch.Generator] | None:
    if generator is None or isinstance(generator, torch.Generator):
        return None
    if len(generator) != rows:
        raise ValueError(f"{len(generator)} per-row generators for a batch of {rows} rows")
    return generator


def randn_rows(shape: tuple[int, ...], generator: Generators, device: torch.device | str) -> torch.Tensor:
    """Standard normal noise of `shape` (rows first), each row from its own generator when given a sequence."""
    gens = _per_row(generator, shape[0])
    if gens is None:
        return torch.randn(shape, generator=generator, device=device)  # type: ignore[arg-type]
    return (
        torch.stack([torch.randn(shape[1:], generator=g, device=device) for g in gens])
        if gens
        else (torch.zeros(shape, device=device))
    )


def randint_rows(high: int, rows: int, generator: Generators, device: torch.device | str) -> torch.Tensor:
    """int64 [rows] uniform in [0, high), each row from its own generator when given a sequence."""
    gens = _per_row(generator, rows)
    if gens is None:
        return torch.randint(0, high, (rows,), generator=generator, device=device)  # type: ignore[arg-type]
    out = [torch.randint(0, high, (1,), generator=g, device=device) for g in gens]
    return torch.cat(out) if out else torch.zeros(0, dtype=torch.long, device=device)


def multinomial_rows(probs: torch.Tensor, generator: Generators) -> torch.Tensor:
    """One index per distribution of `probs` [B, N, K] -> int64 [B, N]; with per-row generators row b's N draws
    come from generator b."""
    gens = _per_row(generator, probs.shape[0])
    if gens is None:
        flat = torch.multinomial(probs.reshape(-1, probs.shape[-1]), 1, generator=generator)  # type: ignore[arg-type]
        return flat.view(probs.shape[:-1])
    if not gens:
        return torch.zeros(probs.shape[:-1], dtype=torch.long, device=probs.device)
    rows = [torch.multinomial(p.reshape(-1, probs.shape[-1]), 1, generator=g) for p, g in zip(probs, gens)]
    return torch.stack(rows).view(probs.shape[:-1])
