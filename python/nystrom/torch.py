"""Torch adapters for inference: the library's attention approximations on [..., N, d] tensors, as a function,
as a drop-in for torch.nn.functional.scaled_dot_product_attention, and as a context manager that puts that drop-in
in place for every module calling `torch.nn.functional.scaled_dot_product_attention` (timm's fused Attention,
Hugging Face models loaded with attn_implementation="sdpa", custom modules using F.scaled_dot_product_attention).

    import nystrom.torch
    with torch.inference_mode(), nystrom.torch.approximate_attention(method="pnp-nystra", landmarks=16,
                                                                     pinv="razavi", pinv_iters=6):
        y = model(x)   # m = 16 landmarks must not exceed the N tokens of each call

Inference only: the library computes on the CPU without autograd, so these functions refuse tensors that require
gradients (run under torch.no_grad() or torch.inference_mode()). Tensors on another device are copied to the CPU
and the result back; float16 and bfloat16 are computed in float32, float64 stays float64. Heads are looped over in
C++ with the GIL released, spread over the OpenMP threads (nystrom.set_threads).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import torch

from . import _nystrom


_FLOATING = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_EMULATED = {torch.float16: "half", torch.bfloat16: "bfloat16"}  # the `precision` of the formats computed in float32


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **options) -> torch.Tensor:
    """Ô of the library's method for q, k [..., N, d] and v [..., N, dv] (the same leading dimensions), as a
    tensor of q's dtype on q's device. `options` are nystrom.attention's keyword arguments (method, landmarks,
    strategy, pinv, pinv_iters, stabilization, scale, precision, ...); float16 and bfloat16 tensors are computed in
    their format (precision "half", "bfloat16") unless `precision` says otherwise."""
    tensors = {"q": q, "k": k, "v": v}
    for name, tensor in tensors.items():
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"nystrom.torch.attention: {name} is a {type(tensor).__name__}, expected a torch.Tensor")
        if tensor.dtype not in _FLOATING:
            raise TypeError(f"nystrom.torch.attention: {name} has dtype {tensor.dtype}; expected a real floating dtype "
                            "(float16, bfloat16, float32 or float64)")
        if tensor.dtype != q.dtype:
            raise ValueError(f"nystrom.torch.attention: q is {q.dtype} but {name} is {tensor.dtype}; pass tensors of "
                             "one dtype")
        if tensor.requires_grad and torch.is_grad_enabled():
            raise RuntimeError(f"nystrom.torch.attention: {name} requires grad; the library computes without autograd "
                               "(inference only): run under torch.no_grad() or torch.inference_mode()")
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    if q.dtype in _EMULATED and options.get("precision") is None:
        # float16 and bfloat16 tensors: the format emulated in float32 (docs/mathematics.md §8).
        options = {**options, "precision": _EMULATED[q.dtype]}
    q_cpu, k_cpu, v_cpu = (t.detach().to(device="cpu", dtype=compute) for t in (q, k, v))
    out = _nystrom.attention(q_cpu, k_cpu, v_cpu, **options)
    return torch.from_numpy(out).to(device=q.device, dtype=q.dtype)


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None, enable_gqa: bool = False,
                                 **options) -> torch.Tensor:
    """torch.nn.functional.scaled_dot_product_attention computed by the library's approximation (`options`:
    nystrom.attention's keyword arguments; the kernel is softmax's exp(s qᵀk) with s = `scale`, default 1/√d).
    Masks, causal attention and dropout have no factored form: they raise ValueError. With enable_gqa, key and
    value heads are repeated to the query heads as torch does."""
    if attn_mask is not None or is_causal:
        raise ValueError("nystrom.torch.scaled_dot_product_attention: attention masks and is_causal are not supported "
                         "(the approximations factor the unmasked kernel)")
    if dropout_p != 0.0:
        raise ValueError(f"nystrom.torch.scaled_dot_product_attention: dropout_p = {dropout_p}; inference only "
                         "(dropout_p must be 0)")
    if enable_gqa and min(query.dim(), key.dim(), value.dim()) < 3:
        raise ValueError("nystrom.torch.scaled_dot_product_attention: enable_gqa needs [..., heads, N, d] tensors, got "
                         f"query, key, value of {query.dim()}, {key.dim()} and {value.dim()} dimensions")
    if enable_gqa and key.shape[-3] != query.shape[-3]:
        if query.shape[-3] % key.shape[-3] != 0:
            raise ValueError(f"nystrom.torch.scaled_dot_product_attention: enable_gqa with {query.shape[-3]} query "
                             f"heads and {key.shape[-3]} key heads; the query heads must be a multiple of the key heads")
        repeat = query.shape[-3] // key.shape[-3]
        key = key.repeat_interleave(repeat, dim=-3)
        value = value.repeat_interleave(repeat, dim=-3)
    if scale is not None:
        options["scale"] = scale
    return attention(query, key, value, **options)


@contextlib.contextmanager
def approximate_attention(**options) -> Iterator[None]:
    """Within the block, torch.nn.functional.scaled_dot_product_attention is replaced by the library's
    approximation with `options` (nystrom.attention's keyword arguments); the original is restored on exit. Code
    that imported the function itself before (`from torch.nn.functional import scaled_dot_product_attention`)
    keeps the original. The replacement is process-wide: do not run other torch code on other threads inside. A
    `scale` among the options applies where the model's call gives none; the model's own scale wins.

    Models that compute their attention by hand (softmax(q kᵀ) written out, as SwinIR, Uformer and DAT do in their
    window attention) make no such call and are left unchanged: when the block ends (without an exception) and no
    call was intercepted, a RuntimeWarning says so. For those window-attention vision models, replace the attention
    module itself (notebooks/vision_models.py's `replace_attention` does it for DAT's `Spatial_Attention`)."""
    original = torch.nn.functional.scaled_dot_product_attention
    default_scale = options.pop("scale", None)
    calls = 0

    def replacement(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        nonlocal calls
        calls += 1
        return scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal,
                                            default_scale if scale is None else scale, enable_gqa, **options)

    torch.nn.functional.scaled_dot_product_attention = replacement
    try:
        yield
    finally:
        torch.nn.functional.scaled_dot_product_attention = original
    if calls == 0:
        warnings.warn("nystrom.torch.approximate_attention: no torch.nn.functional.scaled_dot_product_attention call "
                      "ran inside the block, so nothing was approximated (models that compute attention by hand, as "
                      "the window attention of SwinIR, Uformer and DAT, are not intercepted; for them replace the "
                      "attention module, e.g. with notebooks/vision_models.py's replace_attention)",
                      RuntimeWarning, stacklevel=3)
