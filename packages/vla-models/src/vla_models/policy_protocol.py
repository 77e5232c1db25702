"""The `Policy` protocol: what an app may use of a policy, whatever its model family.

Every registered family's policy class satisfies it (an ``nn.Module`` with the methods below), so an app types
against ``Policy`` and never against a family's class. The methods are the policy contract of the package README:
``predict`` for rollouts, ``evaluate`` to recompute exactly what ``predict`` sampled (with gradients), ``values``
for a critic's prefix forward, ``sft_loss`` for a supervised warm start, ``save_pretrained`` for a folder
``load_policy`` reads back; plus the ``nn.Module`` methods a trainer needs (parameters, state dict, modes,
device moves).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # importing the protocol imports no torch
    import torch
    from torch import nn

    from vla_models.policy_output import PolicyOutput
    from vla_models.sampling import Generators


@runtime_checkable
class Policy(Protocol):
    """A vision-language-action policy with an optional value head.

    Attributes:
        config: The family's typed config (``type(config).family`` names the family; ``build_policy(config)``
            builds the same architecture).
    """

    config: Any

    def predict(
        self,
        obs: Mapping[str, Any],
        *,
        mode: str = "sample",
        temperature: float = 1.0,
        top_k: int | None = None,
        generator: Generators = None,
    ) -> PolicyOutput:
        """One action chunk per observation: actions ``[B, C, A]`` in env units, token log-probs ``[B, C, A]``,
        values ``[B]`` (or None) and the ``forward_inputs`` ``evaluate`` needs. ``mode``: ``"sample"`` or
        ``"greedy"``; ``generator``: one generator, or one per row."""
        ...

    def evaluate(
        self, forward_inputs: Mapping[str, torch.Tensor], *, compute_values: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Recompute what ``predict`` sampled, with gradients: ``(logprobs [B, C, A], entropy [B, C, A], values
        [B] or None)``, float32."""
        ...

    def values(self, obs: Mapping[str, Any]) -> torch.Tensor:
        """V(obs) float32 ``[B]`` from one prefix forward (zeros without a value head)."""
        ...

    def sft_loss(self, obs: Mapping[str, Any], expert_actions: Any) -> tuple[torch.Tensor, dict[str, float]]:
        """The supervised loss on expert chunks ``[B, C, A]`` (env units) and its metrics."""
        ...

    def set_global_step(self, step: int) -> None:
        """The training iteration, for a schedule over training (pi0's noise annealing); a no-op without one."""
        ...

    def save_pretrained(self, path: str) -> None:
        """Write config, weights and processor files that ``load_policy(path)`` reads back."""
        ...

    # the nn.Module methods a trainer uses
    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]: ...

    def named_parameters(self, *args: Any, **kwargs: Any) -> Iterator[tuple[str, nn.Parameter]]: ...

    def modules(self) -> Iterator[nn.Module]: ...

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]: ...

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> Any: ...

    def train(self, mode: bool = True) -> Any: ...

    def eval(self) -> Any: ...

    def to(self, *args: Any, **kwargs: Any) -> Any: ...

    def requires_grad_(self, requires_grad: bool = True) -> Any: ...
