"""Ahead-of-time compile of the Triton kernels for an H100 (sm_90) target, without a GPU.

This runs the real compiler pipeline down to a cubin (Triton IR -> PTX -> ptxas from the triton wheel). It
catches what the CPU interpreter cannot: type or shape errors that only lowering sees, unsupported ``tl.dot``
shapes, and shared memory beyond what an H100 has. Nothing is launched.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

pytestmark = [
    pytest.mark.filterwarnings("ignore:TRITON_DEFAULT_FP_FUSION is unset"),
    pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="needs triton"),
    pytest.mark.skipif(
        os.environ.get("TRITON_INTERPRET", "0") == "1",
        reason="compiles real kernels (TRITON_INTERPRET=1 set)",
    ),
]

H100_SHARED_BYTES = 232448  # 227 KiB opt-in shared memory per block on sm_90
# Pointer arguments that carry the input dtype; every other pointer is fp32 except the int64 ids.
_INPUT_DTYPE_PTRS = {"logits_ptr", "h_ptr", "w_ptr", "grad_logits_ptr"}


def _signature(fn, dtype: str, constexprs: dict) -> dict[str, str]:
    sig = {}
    for name in fn.arg_names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif name.endswith("_ptr"):
            sig[name] = (
                f"*{dtype}" if name in _INPUT_DTYPE_PTRS else ("*i64" if name == "ids_ptr" else "*fp32")
            )
        elif name == "temperature":
            sig[name] = "fp32"
        elif name.startswith("stride_outer") or name.startswith("stride_inner"):
            sig[name] = "i64"
        else:
            sig[name] = "i32"
    return sig


def _compile(fn, dtype: str, constexprs: dict, num_warps: int):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    src = ASTSource(fn=fn, signature=_signature(fn, dtype, constexprs), constexprs=constexprs)
    return triton.compile(
        src, target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps, "num_stages": 3}
    )


def _kernels():
    from vla_models.kernels import triton_hidden, triton_logits

    hidden = {"BLOCK_N": 32, "BLOCK_K": 64, "BLOCK_A": 256, "INPUT_PRECISION": "tf32", "UPCAST_DOT": False}
    return {
        "logits_fwd": (triton_logits._logits_fwd_kernel, {"BLOCK_N": 16, "BLOCK_A": 256}, 4),
        "logits_bwd": (triton_logits._logits_bwd_kernel, {"BLOCK_N": 16, "BLOCK_A": 256}, 4),
        "hidden_fwd": (triton_hidden._hidden_fwd_kernel.fn, hidden, 8),
        "hidden_bwd": (triton_hidden._hidden_bwd_kernel.fn, hidden, 8),
    }


@pytest.mark.parametrize("name", ["logits_fwd", "logits_bwd", "hidden_fwd", "hidden_bwd"])
def test_kernel_compiles_for_h100_in_bf16(name: str) -> None:
    fn, constexprs, num_warps = _kernels()[name]
    try:
        compiled = _compile(fn, "bf16", constexprs, num_warps)
    except RuntimeError as err:  # e.g. no ptxas for this platform in the triton wheel
        if "ptxas" in str(err).lower() and "not found" in str(err).lower():
            pytest.skip(f"no ptxas available: {err}")
        raise
    assert compiled.asm["cubin"], "no cubin produced"
    assert ".target sm_90" in compiled.asm["ptx"]
    assert compiled.metadata.shared <= H100_SHARED_BYTES
