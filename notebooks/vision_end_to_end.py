#!/usr/bin/env python3
"""PnP-Nystra's Tables 2 and 6 end to end: DAT-light ×2 super-resolution with every window attention computed by an
approximation of the library, in-process (the Python module `nystrom`), and what a user of the model sees.

Every `Spatial_Attention` of DAT-light (notebooks/vision_models.py) is replaced, through `replace_attention`, by
`nystrom.attention(q, k, v, method=..., ...)` on the [windows, heads, N, d] batch of each call. Per (model window,
image, configuration) the run records PSNR and SSIM against the ground truth, their drops against the unmodified
model, PSNR / SSIM against the unmodified model's own output, and the time per attention block of the configuration
beside the library's exact attention and the model's own attention, measured in the same run on the same inputs
(`time_ratio`: docs/formats.md §2.5). For sampled windows of the unmodified model it records, per head, the best
rank-m error of the attention matrix S (σ_{m+1}(S)/σ₁(S), Eckart–Young: the floor of every rank-m method) beside the
measured ‖S − Ŝ‖₂/‖S‖₂ of each approximation.

Results: one HDF5 file (default results/vision.h5, docs/formats.md §2.5): root attributes with the provenance,
`/vision` (one row per model window, image and configuration) and `/vision_windows` (one row per configuration,
layer, window and head). The notebook vision_end_to_end.ipynb draws the tables and figures from it.

    .venv/bin/python notebooks/vision_end_to_end.py              # default: 4 images, 128×128 crops (minutes)
    .venv/bin/python notebooks/vision_end_to_end.py --images astronaut,camera --crop-size 256 --repeats 3
    .venv/bin/python notebooks/vision_end_to_end.py --full       # the complete grid (both window models, 5 images)

How the model's attention is mapped onto the library (docs/formats.md §2.5 has the details):
- DAT-light's relative-position bias is one constant per head (data/README.md), which the softmax cancels; any bias
  that varies along a row is refused (the library computes softmax(scale·q kᵀ) only).
- The shifted blocks add Swin's 0 / −100 mask: a window that straddles the wrap-around holds up to four regions that
  attend only within themselves. Each region is a rectangle of the window, and its attention is computed on its own
  (`masks = regions`), with min(m, region tokens) landmarks and window-pool on the region's own grid; exact attention
  this way reproduces the model to float32 precision (asserted). `masks = ignore` approximates the whole window and
  ignores the mask, as the PnP-Nystra authors' code does.
- Exact attention with the authors' clamped kernel exp(min(x, τ)) + max(x − τ, 0), without any Nyström
  approximation, is PnP-Nystra with m = N segment-means landmarks (each landmark is one token, so Ĝ = G_A G_A⁺ G_A =
  G_clamped) and the exact pseudoinverse, in float64 (docs/mathematics.md §2, §3 Corollary 2.2).
- Half precision (`precision` half or bfloat16): the attention alone in that format, the model's other layers in
  float32. The library call gets float32 q, k, v and the keyword precision=<format> (every stored matrix rounded to
  the format, float32 arithmetic: docs/mathematics.md §8) and returns float32. Its control, method `torch`: the
  model's own attention formula (vision_models.softmax_attention) computed by torch on q, k, v, bias and mask cast
  to torch.bfloat16 / torch.float16, the output cast back to float32.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import math
import os
import shlex
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable

# Idle OpenMP threads sleep instead of spinning: torch and the library run one after the other on the same cores in
# every attention call, and a runtime whose threads spin slows the other one down several times (set before torch,
# numpy and nystrom load their OpenMP runtime; an explicit OMP_WAIT_POLICY in the environment wins).
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import h5py  # noqa: E402 (after OMP_WAIT_POLICY)
import numpy as np  # noqa: E402
import torch  # noqa: E402

import nystrom  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import vision_models as vm  # noqa: E402

REPOSITORY = Path(__file__).resolve().parent.parent
FORMAT = "nystrom-results"
# The /vision tables' own version (docs/formats.md §2.5). Version 1 had `precision` as `dtype` (float32, float64).
FORMAT_VERSION = 2
SCALE = 2  # ×2 super-resolution
# `precision` -> the dtype of the arrays handed to the library: float and double are the arithmetic of the call;
# half and bfloat16 are emulated by the library (EMULATED: float32 arrays and the keyword precision=<format>).
TORCH_TYPES = {"float": torch.float32, "double": torch.float64, "half": torch.float32, "bfloat16": torch.float32}
EMULATED = ("bfloat16", "half")
# The torch control's dtype per emulated format (method TORCH: the model's attention computed by torch in it).
TORCH_FORMATS = {"half": torch.float16, "bfloat16": torch.bfloat16}
TORCH = "torch"
ALL_TOKENS = -1  # `landmarks` of a configuration whose landmarks are every token of the (sub)window: m = N
EPS32 = float(np.finfo(np.float32).eps)
# The exact attention through the library must reproduce the unmodified model's raw output to this absolute
# difference (outputs lie in [0, 1]): 64 float32 ulps of 1, after 18 attention blocks with another summation order.
EXACT_TOLERANCE = 64 * EPS32
# HR crops (top, left) of the test images, scikit-image's public-domain / CC0 copies (vision_models.IMAGES); a
# crop larger than the image allows from there moves up and left until it fits (crop_origin).
CROPS = {"astronaut": (40, 160), "chelsea": (60, 120), "coffee": (200, 300), "rocket": (260, 260),
         "camera": (100, 200)}
DEFAULT_IMAGES = ("astronaut", "chelsea", "coffee", "rocket")
FULL_IMAGES = tuple(CROPS)
MODEL_WINDOWS = {"8x32": None, "32x32": 32}  # name -> load_dat_light(window=...): native 8×32 / 32×8, or 32×32
TIMING = ("time per attention block: wall time of the attention step of one call (inputs in, output out, Python "
          "included), averaged over the 18 Spatial_Attention calls of one pass; replays of the unmodified pass's 18 "
          "calls (the same inputs for every configuration) after the forward pass with the configuration as the "
          "warm-up; the best of `repeats` replays, the rounds interleaving the configurations so that a change of "
          "machine load affects them alike; time_ratio = that time / the same time of the library's exact attention")
METRICS = ("PSNR (dB) and SSIM on the Y channel (ITU-R BT.601, [16, 235]) of uint8 images, a border of `scale` "
           "pixels removed; SSIM with Gaussian weights (σ = 1.5, Wang et al. 2004) as skimage computes it; "
           "vision_models.psnr_ssim")


# --- configurations -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Configuration:
    """One way of computing every window attention of the model through the library.

    landmarks: m (performer: the feature count r; ALL_TOKENS: m = N, the tokens themselves); 0 for exact.
    strategy: the landmark strategy (docs/mathematics.md §5, §9.3): window-pool, segment-means, step, or one of the
    searches cross, softmax-cross, maxvol, rpcholesky, farthest-point, farthest-point-means; 'none' for methods
    without landmarks. oversampling: pnp-nystra's query landmarks per key landmark (≥ 1; ⌈oversampling·m⌉ rows of
    Q̄, a rectangular core whose pseudoinverse must be exact or truncated); in a (sub)window of fewer tokens than
    that, every token. pinv: exact, razavi (pinv_iters iterations), truncated (the SVD cut at √eps·σ₁) or 'none'.
    window_grid: the window-pool grid ('square': closest-square factors of m, the authors' code; 'aspect': the
    window's aspect ratio); 'none' for other strategies. clamp_threshold: τ of the clamped kernel (NaN unless
    stabilization is clamped). masks: 'regions' (each region of a masked window on its own) or 'ignore' ('model'
    for method TORCH). precision: the arithmetic of the library call, 'float' (float32, the model's) or 'double'
    (float64); 'half' or 'bfloat16': float32 arrays and the keyword precision=<format> (the format emulated by the
    library). Method TORCH ('torch'): no library call, the model's own attention computed by torch in the format
    of `precision` (TORCH_FORMATS), the control of the library's half and bfloat16 rows."""

    name: str
    method: str
    landmarks: int = 0
    strategy: str = "none"
    oversampling: float = 1.0
    pinv: str = "none"
    pinv_iters: int = 0
    stabilization: str = "none"
    clamp_threshold: float = math.nan
    window_grid: str = "none"
    masks: str = "regions"
    precision: str = "float"

    def keywords(self, tokens: int, window: tuple[int, int], scale: float) -> dict:
        """The keyword arguments of nystrom.attention / approximate for one (sub)window of `tokens` tokens laid out
        as `window` (rows × columns)."""
        keywords: dict = {"method": self.method, "scale": scale}
        if self.precision in EMULATED:
            keywords["precision"] = self.precision
        if self.method == "exact":
            return keywords
        m = tokens if self.landmarks == ALL_TOKENS else min(self.landmarks, tokens)
        if self.method == "performer":
            keywords["features"] = self.landmarks
            return keywords
        keywords["landmarks"] = m
        if self.strategy != "none" and self.method != "nystromformer":
            keywords["strategy"] = self.strategy
        if self.strategy == "window-pool":
            keywords["window"] = tuple(window)
            keywords["window_grid"] = self.window_grid
        if self.oversampling != 1.0:
            keywords["oversampling"] = oversampling_within(self.oversampling, m, tokens)
        keywords["pinv"] = self.pinv
        if self.pinv not in ("exact", "truncated"):
            keywords["pinv_iters"] = self.pinv_iters
        if self.method == "pnp-nystra":
            keywords["stabilization"] = self.stabilization
            if self.stabilization == "clamped":
                keywords["clamp_threshold"] = self.clamp_threshold
        return keywords

    def rank(self, tokens: int) -> int:
        """The largest rank of the implied attention matrix Ŝ (m; performer r); N for exact attention."""
        return tokens if self.landmarks in (0, ALL_TOKENS) else min(self.landmarks, tokens)


def oversampling_within(oversampling: float, m: int, tokens: int) -> float:
    """The oversampling keyword for m key landmarks among `tokens` tokens: `oversampling`, or, where ⌈oversampling·m⌉
    query landmarks would exceed the tokens (a small region of a masked window), the largest value that asks for
    every token (the module refuses more query landmarks than N)."""
    if math.ceil(oversampling * m) <= tokens:
        return oversampling
    within = tokens / m
    while math.ceil(within * m) > tokens:
        within = math.nextafter(within, 0.0)
    return within


def pnp(m: int = 16, iterations: int = 6, *, pinv: str = "razavi", stabilization: str = "row-max",
        strategy: str = "window-pool", oversampling: float = 1.0, grid: str = "square", tau: float = 5.0,
        masks: str = "regions", precision: str = "float", name_grid: bool = False, tag: str = "") -> Configuration:
    """A PnP-Nystra configuration, named after what it sets (the window-pool grid only with name_grid: the run's
    own grid is in every row's window_grid; the oversampling where it is not 1; an emulated precision at the
    end)."""
    iterations = iterations if pinv == "razavi" else 0
    m_text = "N" if m == ALL_TOKENS else str(m)
    parts = [f"pnp-nystra m={m_text}", f"{pinv}×{iterations}" if pinv == "razavi" else f"{pinv} pinv",
             stabilization]
    if stabilization == "clamped":
        parts[-1] = f"clamped τ={tau:g}"
    if strategy != "window-pool":
        parts.append(strategy)
    elif name_grid:
        parts.append(f"{grid} grid")
    if oversampling != 1.0:
        parts.append(f"oversampling {oversampling:g}")
    if masks != "regions":
        parts.append(f"masks {masks}")
    if precision in EMULATED:
        parts.append(precision)
    return Configuration(name=tag or ", ".join(parts), method="pnp-nystra", landmarks=m, strategy=strategy,
                         oversampling=oversampling, pinv=pinv, pinv_iters=iterations, stabilization=stabilization,
                         clamp_threshold=tau if stabilization == "clamped" else math.nan,
                         window_grid=grid if strategy == "window-pool" else "none", masks=masks,
                         precision=precision)


EXACT = Configuration(name="exact", method="exact")


def exact_in(precision: str) -> Configuration:
    """The library's exact attention with every stored matrix rounded to an emulated format."""
    return Configuration(name=f"exact, {precision}", method="exact", precision=precision)


def torch_control(precision: str) -> Configuration:
    """The model's own attention computed by torch in an emulated format (TorchAttention): what that format costs
    the model without the library."""
    return Configuration(name=f"torch attention, {precision}", method=TORCH, masks="model", precision=precision)


def half_precision(precision: str, common: dict) -> list[Configuration]:
    """The rows of one emulated format: torch's own attention in it (the control), the library's exact attention,
    PnP-Nystra m = 16 with razavi×6 and with the exact pseudoinverse (whose core's pseudoinverse can leave half's
    range: a non-finite output, counted in `non_finite`, PSNR NaN)."""
    return [torch_control(precision), exact_in(precision), pnp(16, 6, precision=precision, **common),
            pnp(16, pinv="exact", precision=precision, **common)]


# Landmark strategies beside the authors' window-pool (docs/mathematics.md §5, §9.3): the default grid runs
# DEFAULT_STRATEGIES at m = 16 (razavi×6 and the exact pseudoinverse), --full every one of FULL_STRATEGIES at
# m ∈ LANDMARK_SWEEP with each of STRATEGY_PINVS. Both add OUTPUT_CONFIGURATION at every m of LANDMARK_SWEEP: the
# strategy with the smallest attention-output error on the DAT-light dumps (farthest-point means, twice as many
# query landmarks, the least-squares core in the norm of S's rows, its pseudoinverse truncated).
DEFAULT_STRATEGIES = ("cross", "maxvol", "farthest-point-means")
FULL_STRATEGIES = ("window-pool", "segment-means", "cross", "softmax-cross", "maxvol", "rpcholesky", "farthest-point",
                   "farthest-point-means")
LANDMARK_SWEEP = (8, 16, 32)
STRATEGY_PINVS = ({"iterations": 1}, {"iterations": 3}, {"iterations": 6}, {"pinv": "exact"})
OUTPUT_CONFIGURATION = {"strategy": "farthest-point-means", "oversampling": 2.0, "stabilization": "row-sum",
                        "pinv": "truncated"}


def landmark_strategies(full: bool, common: dict) -> list[Configuration]:
    """The landmark-strategy rows (row-max unless OUTPUT_CONFIGURATION): by default DEFAULT_STRATEGIES at m = 16
    with razavi×6 and with the exact pseudoinverse; with `full` the product FULL_STRATEGIES × LANDMARK_SWEEP ×
    STRATEGY_PINVS (razavi×1, ×3, ×6, exact); then OUTPUT_CONFIGURATION at every m of LANDMARK_SWEEP."""
    options = dict(common, stabilization="row-max")
    if full:
        rows = [pnp(m, strategy=strategy, **pinv, **options) for strategy in FULL_STRATEGIES
                for m in LANDMARK_SWEEP for pinv in STRATEGY_PINVS]
    else:
        rows = [pnp(16, strategy=strategy, **pinv, **options) for strategy in DEFAULT_STRATEGIES
                for pinv in ({"iterations": 6}, {"pinv": "exact"})]
    return rows + [pnp(m, **dict(common, **OUTPUT_CONFIGURATION)) for m in LANDMARK_SWEEP]


def configurations(full: bool, grid: str, tau: float) -> list[Configuration]:
    """The grid of the run. Default: PnP-Nystra (row-max, window-pool, razavi×6) with m ∈ {8, 16, 32}; m = 16 with
    1 and 3 iterations and the exact pseudoinverse; m = 16 with the clamped kernel and without stabilization;
    exact attention with the clamped kernel (m = N); Nyströmformer, Performer and CUR at m = 16; exact attention;
    the landmark strategies cross, maxvol and farthest-point-means at m = 16 (row-max, razavi×6 and exact pinv) and
    farthest-point-means with oversampling 2, row-sum and the truncated pseudoinverse at m ∈ {8, 16, 32}
    (landmark_strategies); in bfloat16 and in half (the attention only): torch's own attention (the control), the
    library's exact attention, PnP-Nystra m = 16 with razavi×6 and with the exact pseudoinverse (row-max,
    window-pool).
    --full adds 10 and 15 iterations, the m and iteration sweeps with the clamped kernel at τ and at τ = 0 (the
    authors' Uformer and RVRT code), every landmark strategy of FULL_STRATEGIES at m ∈ {8, 16, 32} with razavi×1,
    ×3, ×6 and the exact pseudoinverse (row-max), Corollary 2.2 (m = N, exact pinv), the masks ignored as in the
    authors' code, segment-means landmarks, and the other window-pool grid."""
    common = {"grid": grid, "tau": tau}
    exact_clamped = dict(common, pinv="exact", stabilization="clamped", strategy="segment-means", precision="double")
    grid_list = [EXACT, pnp(ALL_TOKENS, **exact_clamped, tag=f"exact attention, clamped kernel τ={tau:g}")]
    kernels = [{"stabilization": "row-max"}]
    if full:
        # The authors' clamped kernel at the run's τ, and at τ = 0 of their Uformer and RVRT code (PnP-Nystra
        # Table 6 is Uformer-B).
        kernels += [{"stabilization": "clamped"}] + ([{"stabilization": "clamped", "tau": 0.0}] if tau != 0.0 else [])
    for kernel in kernels:
        options = dict(common, **kernel)
        for m in (8, 16, 32):
            grid_list.append(pnp(m, 6, **options))
        for iterations in (1, 3, 10, 15) if full else (1, 3):
            grid_list.append(pnp(16, iterations, **options))
        grid_list.append(pnp(16, pinv="exact", **options))
    grid_list += [pnp(16, 6, **dict(common, stabilization="clamped")),
                  pnp(16, 6, **dict(common, stabilization="none")),
                  Configuration(name="nystromformer m=16", method="nystromformer", landmarks=16,
                                strategy="segment-means", pinv="razavi", pinv_iters=6),
                  Configuration(name="performer r=16", method="performer", landmarks=16),
                  Configuration(name="cur m=16", method="cur", landmarks=16, strategy="step", pinv="exact")]
    grid_list += landmark_strategies(full, common)
    for precision in EMULATED:
        grid_list += half_precision(precision, dict(common, stabilization="row-max"))
    if full:
        other_grid = "aspect" if grid == "square" else "square"
        grid_list += [
            pnp(ALL_TOKENS, pinv="exact", strategy="segment-means", precision="double", **common,
                tag="pnp-nystra m=N, exact pinv, row-max (Corollary 2.2)"),
            pnp(16, 6, masks="ignore", **common),
            pnp(16, 6, strategy="segment-means", **common),
            # The window-pool grid that follows the window's aspect ratio (m = 16 on 8×32: 2×8) against the
            # authors' closest square (4×4).
            pnp(16, 6, **dict(common, grid=other_grid, name_grid=True)),
        ]
        if tau != 0.0:
            grid_list.append(pnp(ALL_TOKENS, **dict(exact_clamped, tau=0.0),
                                 tag="exact attention, clamped kernel τ=0"))
    return unique_names(grid_list)


def unique_names(grid_list: list[Configuration]) -> list[Configuration]:
    """Each configuration once, in order of first appearance (the full strategy product repeats the window-pool
    sweeps); refuses two different configurations under one name, which would make the tables ambiguous."""
    unique: dict[str, Configuration] = {}
    for configuration in grid_list:
        earlier = unique.setdefault(configuration.name, configuration)
        if repr(earlier) != repr(configuration):  # repr: NaN thresholds compare equal
            raise AssertionError(f"two configurations named {configuration.name!r}: {earlier} and {configuration}")
    return list(unique.values())


# --- the attention hook -------------------------------------------------------------------------------------------


@dataclass
class Region:
    """Tokens of one region of a window (ascending, row-major within the window) and its rows × columns."""

    tokens: torch.Tensor
    shape: tuple[int, int]


def regions_of(mask: torch.Tensor, window: tuple[int, int]) -> list[Region]:
    """The regions of one window from its additive mask [N, N] (0 within a region, negative between regions):
    each must be a rectangle of the h×w window (Swin's shifted-window mask is)."""
    allowed = mask == 0
    label = allowed.to(torch.int8).argmax(dim=1)  # the first token each token may attend to names its region
    if not torch.equal(allowed, label[:, None] == label[None, :]):
        raise ValueError("the window's mask is not block-diagonal over regions (0 within, negative between)")
    regions = []
    width = window[1]
    for value in torch.unique(label):
        tokens = torch.nonzero(label == value).flatten()
        rows, columns = tokens // width, tokens % width
        shape = (int(rows.max() - rows.min()) + 1, int(columns.max() - columns.min()) + 1)
        if shape[0] * shape[1] != tokens.numel():
            raise ValueError(f"a region of the {window[0]}x{window[1]} window's mask is not a rectangle")
        regions.append(Region(tokens, shape))
    return regions


@dataclass
class Group:
    """Sub-problems of one shape across a call's batch: batch entries, their tokens [G, n], and the shape."""

    batch: torch.Tensor
    tokens: torch.Tensor
    shape: tuple[int, int]


def partition(batch: int, tokens: int, window: tuple[int, int], mask: torch.Tensor | None) -> list[Group]:
    """The call's sub-problems grouped by shape: the whole window for windows without a mask (or when the mask is
    all zero), each region of a masked window otherwise. Batch entry b uses mask[b % W]."""
    if mask is None or not mask.any():
        return [Group(torch.arange(batch), torch.arange(tokens).expand(batch, tokens), tuple(window))]
    windows = mask.shape[0]
    by_shape: dict[tuple[int, int], tuple[list[int], list[torch.Tensor]]] = {}
    per_window = [regions_of(mask[w], window) for w in range(windows)]
    for b in range(batch):
        for region in per_window[b % windows]:
            entries, token_lists = by_shape.setdefault(region.shape, ([], []))
            entries.append(b)
            token_lists.append(region.tokens)
    return [Group(torch.tensor(entries), torch.stack(token_lists), shape)
            for shape, (entries, token_lists) in by_shape.items()]


def check_bias(bias: torch.Tensor | None) -> None:
    """A bias constant along every row cancels in the softmax; anything else the library cannot apply."""
    if bias is not None and (bias.amax(dim=-1) - bias.amin(dim=-1)).abs().max() > 0:
        raise ValueError("the attention has a position bias that varies along a row: nystrom.attention computes "
                         "softmax(scale·q kᵀ) without one")


class LibraryAttention:
    """A vision_models.Attention that computes each call with nystrom.attention under a configuration; counts the
    non-finite entries of its outputs in `non_finite`."""

    def __init__(self, configuration: Configuration):
        self.configuration = configuration
        self.dtype = TORCH_TYPES[configuration.precision]
        self.non_finite = 0
        self._partitions: dict[tuple, list[Group]] = {}

    def _groups(self, q: torch.Tensor, mask: torch.Tensor | None, window: tuple[int, int]) -> list[Group]:
        if self.configuration.masks == "ignore":
            mask = None
        key = (q.shape[0], q.shape[2], tuple(window), None if mask is None else (mask.data_ptr(), mask.shape))
        if key not in self._partitions:
            self._partitions[key] = partition(q.shape[0], q.shape[2], window, mask)
        return self._partitions[key]

    def _library(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, shape: tuple[int, int],
                 scale: float) -> torch.Tensor:
        keywords = self.configuration.keywords(q.shape[-2], shape, scale)
        with warnings.catch_warnings():
            # Non-finite output rows are counted in `non_finite` and reported in the table, not warned per call.
            warnings.filterwarnings("ignore", "attention: .* not finite", RuntimeWarning)
            out = nystrom.attention(q.to(self.dtype), k.to(self.dtype), v.to(self.dtype), **keywords)
        return torch.from_numpy(out).to(v.dtype)

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
                 mask: torch.Tensor | None, scale: float, window: tuple[int, int]) -> torch.Tensor:
        check_bias(bias)
        if not all(torch.isfinite(x).all() for x in (q, k, v)):
            # An earlier block already produced NaN or Inf (the library refuses such input): the model is broken.
            self.non_finite += v.numel()
            return torch.full_like(v, math.nan)
        groups = self._groups(q, mask, window)
        if len(groups) == 1 and groups[0].tokens.shape[1] == q.shape[2]:
            out = self._library(q, k, v, groups[0].shape, scale)
        else:
            out = torch.empty_like(v)
            for group in groups:
                rows = group.batch[:, None]
                pick = [x[rows, :, group.tokens].transpose(1, 2) for x in (q, k, v)]  # [G, heads, n, d]
                out[rows, :, group.tokens] = self._library(*pick, group.shape, scale).transpose(1, 2)
        self.non_finite += int((~torch.isfinite(out)).sum())
        return out


class TorchAttention:
    """The control of an emulated format (method TORCH): the model's own attention, vision_models.softmax_attention
    (the same formula and order of operations), computed by torch with q, k, v, the bias and the mask cast to the
    format (torch.bfloat16 / torch.float16, on the CPU), the output cast back to the model's dtype. Counts the
    non-finite entries of its outputs in `non_finite`."""

    def __init__(self, configuration: Configuration):
        if configuration.method != TORCH or configuration.precision not in TORCH_FORMATS:
            raise ValueError(f"{configuration.name}: the torch control needs method {TORCH!r} and a precision of "
                             f"{', '.join(TORCH_FORMATS)}")
        self.configuration = configuration
        self.dtype = TORCH_FORMATS[configuration.precision]
        self.non_finite = 0

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
                 mask: torch.Tensor | None, scale: float, window: tuple[int, int]) -> torch.Tensor:
        q, k, v_cast, bias, mask = (None if x is None else x.to(self.dtype) for x in (q, k, v, bias, mask))
        out = vm.softmax_attention(q, k, v_cast, bias, mask, scale, window).to(v.dtype)
        self.non_finite += int((~torch.isfinite(out)).sum())
        return out


def attention_of(configuration: Configuration) -> LibraryAttention | TorchAttention:
    """The vision_models.Attention that computes a configuration: the torch control or the library."""
    return TorchAttention(configuration) if configuration.method == TORCH else LibraryAttention(configuration)


@dataclass
class Call:
    """The arguments of one attention call (kept from the unmodified pass for timing replays and the floor)."""

    module: str
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    bias: torch.Tensor | None
    mask: torch.Tensor | None
    scale: float
    window: tuple[int, int]

    def replay(self, attention: Callable) -> float:
        start = time.perf_counter()
        attention(self.q, self.k, self.v, self.bias, self.mask, self.scale, self.window)
        return time.perf_counter() - start


class Recorder:
    """The model's own attention (vision_models.softmax_attention, bit-identical to the unmodified model), keeping
    every call's arguments."""

    def __init__(self, names: list[str]):
        self.names = iter(names)
        self.calls: list[Call] = []

    def __call__(self, q, k, v, bias, mask, scale, window):
        self.calls.append(Call(next(self.names), q, k, v, bias, mask, scale, tuple(window)))
        return vm.softmax_attention(q, k, v, bias, mask, scale, window)


# --- measurements -------------------------------------------------------------------------------------------------


@dataclass
class Pass:
    """One forward pass with a configuration: the raw output, its wall time, the attention calls."""

    output: torch.Tensor
    forward_seconds: float
    calls: int
    non_finite: int


def forward(model: torch.nn.Module, low: np.ndarray, attention: Callable) -> Pass:
    seconds: dict[str, list[float]] = {}
    start = time.perf_counter()
    with vm.replace_attention(model, attention, seconds):
        output = vm.super_resolve(model, low)
    elapsed = time.perf_counter() - start
    calls = sum(len(values) for values in seconds.values())
    return Pass(output, elapsed, calls, getattr(attention, "non_finite", 0))


def image_metrics(output: torch.Tensor, reference: np.ndarray) -> tuple[float, float]:
    """PSNR and SSIM of a raw model output against a uint8 image; NaN when the output is not finite."""
    if not torch.isfinite(output).all():
        return math.nan, math.nan
    return vm.psnr_ssim(vm.to_image(output), reference, SCALE)


def window_rows(calls: list[Call], windows_per_layer: int, configuration: Configuration,
                common: dict) -> list[dict]:
    """Per head of the first `windows_per_layer` windows without a mask of every layer: the floor
    σ_{m+1}(S)/σ₁(S) and the measured ‖S − Ŝ‖₂/‖S‖₂, the output error and the pseudoinverse's status."""
    rows = []
    dtype = TORCH_TYPES[configuration.precision]
    for layer, call in enumerate(calls):
        batch, heads, tokens, _ = call.q.shape
        unmasked = [b for b in range(batch) if call.mask is None or not call.mask[b % call.mask.shape[0]].any()]
        for b in unmasked[:windows_per_layer]:
            for head in range(heads):
                q, k, v = (x[b, head].to(dtype).numpy() for x in (call.q, call.k, call.v))
                singular = floor_values(q, k, call.scale, configuration.rank(tokens))
                keywords = configuration.keywords(tokens, call.window, call.scale)
                approximation = nystrom.approximate(q, k, v, **keywords)
                exact = nystrom.attention(q, k, v, method="exact", scale=call.scale)
                error = output_error = math.nan  # a non-finite Ŝ (float32 overflow without stabilization)
                if np.isfinite(approximation.output).all():
                    error = attention_matrix_error(q, k, call.scale, approximation) / singular[0]
                    output_error = nystrom.output_errors(exact, approximation.output).relative_frobenius
                rows.append(dict(common, layer=layer, module=call.module, window=b, head=head, n=tokens,
                                 window_shape=f"{call.window[0]}x{call.window[1]}",
                                 rank=configuration.rank(tokens), sigma1=singular[0],
                                 floor=singular[1] / singular[0],
                                 relative_spectral_error=error, output_relative_error=output_error,
                                 pinv_status=approximation.pinv_status or "none"))
    return rows


def attention_matrix_error(q: np.ndarray, k: np.ndarray, scale: float, approximation) -> float:
    """‖S − Ŝ‖₂ of the approximation's implied attention matrix Ŝ (for the clamped kernel its normalized matrix,
    so the clamp's change counts) against the exact S = softmax(scale·q kᵀ), in float64: Lanczos on the N×N
    difference (a full SVD where its basis would span the matrix); NaN when Lanczos did not converge."""
    exact = nystrom.attention_matrix(q.astype(np.float64), k.astype(np.float64), scale=scale)
    top = nystrom.top_singular_values(exact - approximation.implied_attention().astype(np.float64), 1)
    return float(top.values[0]) if top.converged else math.nan


_singular_values: dict[tuple, np.ndarray] = {}


def floor_values(q: np.ndarray, k: np.ndarray, scale: float, rank: int) -> tuple[float, float]:
    """σ₁(S) and σ_{rank+1}(S) (0 when rank ≥ N) of the attention matrix S = softmax(scale·q kᵀ), computed in
    float64 by the module: every singular value by a full SVD up to N = 256, the top ones by Lanczos above.
    Kept per (q, k, scale), since every configuration asks for the same windows (as copies: a result's values
    are a view that keeps the module's result object alive)."""
    key = (q.astype(np.float32).tobytes(), k.astype(np.float32).tobytes(), scale)
    tokens = q.shape[0]
    wanted = min(rank + 1, tokens)
    if key not in _singular_values or _singular_values[key].size < wanted:
        s = nystrom.attention_matrix(q.astype(np.float64), k.astype(np.float64), scale=scale)
        _singular_values[key] = (nystrom.singular_values(s) if tokens <= 256 else
                                 nystrom.top_singular_values(s, max(wanted, 33)).values.copy())
    values = _singular_values[key]
    return float(values[0]), float(values[rank]) if rank < tokens else 0.0


# --- the run --------------------------------------------------------------------------------------------------------


@dataclass
class Options:
    output: Path
    models: tuple[str, ...]
    images: tuple[str, ...]
    crop_size: int
    configurations: list[Configuration]
    repeats: int
    floor_images: int
    floor_windows: int
    threads: int
    clamp_threshold: float
    window_grid: str
    command_line: str
    quiet: bool = False


def describe_configuration(configuration: Configuration) -> dict:
    row = dataclasses.asdict(configuration)
    row["configuration"] = row.pop("name")
    return row


UNMODIFIED = {"configuration": "unmodified", "method": "model", "landmarks": 0, "strategy": "none", "oversampling": 1.0,
              "pinv": "none", "pinv_iters": 0, "stabilization": "none", "clamp_threshold": math.nan,
              "window_grid": "none", "masks": "model", "precision": "float"}


def run(options: Options, log: Callable[[str], None]) -> tuple[list[dict], list[dict]]:
    """The whole grid; returns the /vision and /vision_windows rows."""
    rows: list[dict] = []
    windows: list[dict] = []
    for model_window in options.models:
        model = vm.load_dat_light(SCALE, MODEL_WINDOWS[model_window])
        for image_index, image in enumerate(options.images):
            image_rows, image_windows = measure_image(model, model_window, image, image_index, options, log)
            rows += image_rows
            windows += image_windows
    return rows, windows


def measure_image(model: torch.nn.Module, model_window: str, image: str, image_index: int, options: Options,
                  log: Callable[[str], None]) -> tuple[list[dict], list[dict]]:
    """Every configuration on one image: quality, time per block and, for the first `floor_images` images, the
    floor and kernel errors of sampled windows."""
    whole = vm.load_image(image)
    top, left = crop_origin(image, whole.shape, options.crop_size)
    high = vm.crop(whole, top, left, options.crop_size, options.crop_size)
    low = vm.low_resolution(high, SCALE)
    recorder = Recorder([name for name, _ in vm.spatial_attention_modules(model)])
    reference = forward(model, low, recorder)
    psnr0, ssim0 = image_metrics(reference.output, high)
    common = {"model_window": model_window, "image": image, "crop_top": top, "crop_left": left,
              "crop_size": options.crop_size, "n": recorder.calls[0].q.shape[2], "attention_calls": reference.calls}
    log(f"{model_window} {image} [{top}:+{options.crop_size}, {left}:+{options.crop_size}]: unmodified PSNR "
        f"{psnr0:.3f} dB, SSIM {ssim0:.4f}, forward pass {reference.forward_seconds:.1f} s")
    rows = [dict(common, **UNMODIFIED, psnr=psnr0, ssim=ssim0, psnr_drop=0.0, ssim_drop=0.0,
                 psnr_vs_unmodified=math.inf, ssim_vs_unmodified=1.0, max_abs_difference=0.0,
                 forward_seconds=reference.forward_seconds, non_finite=0)]
    # The m = N controls cost O(N³) per head: they run on the first image of each window model only.
    configurations = [c for c in options.configurations if image_index == 0 or c.landmarks != ALL_TOKENS]
    attentions = {c.name: attention_of(c) for c in configurations}
    width = max(52, *(len(c.name) for c in configurations))  # the printed names' column
    for configuration in configurations:
        done = forward(model, low, attentions[configuration.name])
        difference = float((done.output - reference.output).abs().max())
        if configuration is EXACT and not difference <= EXACT_TOLERANCE:
            raise AssertionError(f"exact attention through the library differs from the unmodified model by "
                                 f"{difference:.3g} > {EXACT_TOLERANCE:.3g} ({model_window}, {image})")
        psnr, ssim = image_metrics(done.output, high)
        psnr_model, ssim_model = image_metrics(done.output, vm.to_image(reference.output))
        rows.append(dict(common, **describe_configuration(configuration), psnr=psnr, ssim=ssim,
                         psnr_drop=psnr0 - psnr, ssim_drop=ssim0 - ssim, psnr_vs_unmodified=psnr_model,
                         ssim_vs_unmodified=ssim_model, max_abs_difference=difference,
                         forward_seconds=done.forward_seconds, non_finite=done.non_finite))
        log(f"  {configuration.name:<{width}} PSNR {psnr:8.3f} (drop {psnr0 - psnr:7.3f}) SSIM {ssim:.4f} "
            f"vs model {psnr_model:7.2f} dB, forward pass {done.forward_seconds:.1f} s")
    best = best_times(recorder, attentions, options.repeats)
    exact_seconds = best.get(EXACT.name, math.nan)
    if options.repeats:
        log(f"  time per attention block, best of {options.repeats} replays of the 18 calls (the table's "
            f"seconds_per_block and time_ratio):")
    for row in rows:
        seconds = best[row["configuration"]]
        row.update(seconds_per_block=seconds, exact_seconds_per_block=exact_seconds,
                   unmodified_seconds_per_block=best["unmodified"], time_ratio=seconds / exact_seconds,
                   time_ratio_unmodified=seconds / best["unmodified"])
        if options.repeats:
            log(f"  {row['configuration']:<{width}} {1e3 * seconds:8.2f} ms  {row['time_ratio']:6.2f} × exact  "
                f"{row['time_ratio_unmodified']:6.2f} × the model's own")
    windows = []
    if image_index < options.floor_images and options.floor_windows > 0:
        for configuration in configurations:
            if configuration.method not in ("exact", TORCH) and configuration.masks == "regions":
                columns = dict(model_window=model_window, image=image, **describe_configuration(configuration))
                windows += window_rows(recorder.calls, options.floor_windows, configuration, columns)
        log(f"  floor and kernel errors: {len(windows)} rows")
    return rows, windows


def best_times(recorder: Recorder, attentions: dict[str, LibraryAttention | TorchAttention],
               repeats: int) -> dict[str, float]:
    """Seconds per attention block of the unmodified model and of every configuration: the best of `repeats`
    replays of the unmodified pass's 18 calls (the same inputs for every configuration; each configuration's own
    forward pass, done before, is its warm-up), each round interleaving the configurations. The m = N controls are
    not replayed (O(N³) per head: their time says nothing); NaN for them and with repeats = 0."""
    replayed = {"unmodified": vm.softmax_attention,
                **{name: a for name, a in attentions.items() if a.configuration.landmarks != ALL_TOKENS}}
    samples: dict[str, list[float]] = {name: [] for name in ("unmodified", *attentions)}
    for _ in range(repeats):
        for name, attention in replayed.items():
            samples[name].append(sum(call.replay(attention) for call in recorder.calls) / len(recorder.calls))
    return {name: min(values, default=math.nan) for name, values in samples.items()}


def crop_origin(image: str, shape: tuple[int, ...], size: int) -> tuple[int, int]:
    """The top-left corner of the image's size×size crop: CROPS[image], moved up and left as far as a larger crop
    needs to fit in the image."""
    top, left = CROPS[image]
    return max(0, min(top, shape[0] - size)), max(0, min(left, shape[1] - size))


# --- the results file ---------------------------------------------------------------------------------------------


VISION_COLUMNS = (
    "model_window", "image", "crop_top", "crop_left", "crop_size", "n", "configuration", "method", "landmarks",
    "strategy", "oversampling", "pinv", "pinv_iters", "stabilization", "clamp_threshold", "window_grid", "masks",
    "precision", "psnr", "ssim", "psnr_drop", "ssim_drop", "psnr_vs_unmodified", "ssim_vs_unmodified", "max_abs_difference",
    "seconds_per_block", "exact_seconds_per_block", "unmodified_seconds_per_block", "time_ratio",
    "time_ratio_unmodified", "forward_seconds", "attention_calls", "non_finite",
)
WINDOW_COLUMNS = (
    "model_window", "image", "configuration", "method", "landmarks", "strategy", "pinv", "pinv_iters",
    "stabilization", "clamp_threshold", "window_grid", "masks", "precision", "layer", "module", "window",
    "window_shape", "head", "n", "rank", "sigma1", "floor", "relative_spectral_error", "output_relative_error",
    "pinv_status",
)


def git_revision() -> str:
    try:
        result = subprocess.run(["git", "-C", str(REPOSITORY), "describe", "--always", "--dirty", "--abbrev=12"],
                                capture_output=True, text=True, check=True)
        return result.stdout.strip() or "unknown"
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def packages() -> str:
    names = ("nystrom", "torch", "numpy", "h5py", vm.PACKAGE, "scikit-image", "pillow", "einops")
    return ", ".join(f"{name} {importlib.metadata.version(name)}" for name in names)


def write_table(group: h5py.Group, rows: list[dict], columns: Iterable[str]) -> None:
    for column in columns:
        values = [row[column] for row in rows]
        if all(isinstance(value, str) for value in values) and values:
            group.create_dataset(column, data=np.array(values, dtype=object), dtype=h5py.string_dtype())
        elif all(isinstance(value, (int, np.integer)) and not isinstance(value, bool) for value in values):
            group.create_dataset(column, data=np.array(values, dtype=np.int64))
        else:
            group.create_dataset(column, data=np.array(values, dtype=np.float64))


def write_results(options: Options, rows: list[dict], windows: list[dict], load: tuple[tuple, tuple]) -> None:
    """Writes the file next to its target and renames it onto it: an existing file is never left half-written."""
    options.output.parent.mkdir(parents=True, exist_ok=True)
    partial = options.output.with_name(options.output.name + ".partial")
    crops = {(row["image"], row["crop_top"], row["crop_left"]) for row in rows}
    images = "; ".join(f"{name} [{top}:+{options.crop_size}, {left}:+{options.crop_size}] ({vm.IMAGES[name]})"
                       for name, top, left in sorted(crops, key=lambda crop: options.images.index(crop[0])))
    with h5py.File(partial, "w") as file:
        attributes = {
            "format": FORMAT, "format_version": np.int64(FORMAT_VERSION),
            "program_version": importlib.metadata.version("nystrom"), "git_revision": git_revision(),
            "command_line": options.command_line,
            "created": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "threads": np.int64(options.threads), "input": images,
            "model": f"DAT-light x{SCALE} ({vm.PACKAGE} {importlib.metadata.version(vm.PACKAGE)}), windows "
                     + ", ".join(options.models),
            "model_weights": vm.weights_sha256(SCALE), "scale": np.int64(SCALE), "packages": packages(),
            "blas_core": nystrom.blas_core(), "clamp_threshold": float(options.clamp_threshold),
            "window_grid": options.window_grid, "skipped_configurations": "",
            "timing": f"{TIMING}; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '')}",
            "repeats": np.int64(options.repeats), "metrics": METRICS,
            "load_average": "start {:.2f} {:.2f} {:.2f}; end {:.2f} {:.2f} {:.2f}".format(*load[0], *load[1]),
        }
        for key, value in attributes.items():
            file.attrs[key] = value
        write_table(file.create_group("vision"), rows, VISION_COLUMNS)
        write_table(file.create_group("vision_windows"), windows, WINDOW_COLUMNS)
    os.replace(partial, options.output)


# --- command line -------------------------------------------------------------------------------------------------


def parse(argv: list[str] | None) -> Options:
    parser = argparse.ArgumentParser(
        description="DAT-light x2 super-resolution with every window attention computed by the library: PSNR / "
                    "SSIM drops and time per attention block (PnP-Nystra Tables 2 and 6) into an HDF5 file")
    parser.add_argument("--output", "-o", type=Path, default=REPOSITORY / "results" / "vision.h5")
    parser.add_argument("--full", action="store_true",
                        help="the complete grid: both window models (8x32, 32x32), every image, every "
                             "configuration, 3 timing replays (tens of minutes)")
    parser.add_argument("--models", help="window models, comma-separated: 8x32 (native), 32x32 "
                                         "(default 8x32; --full: both)")
    parser.add_argument("--images", help=f"scikit-image images, comma-separated (default {','.join(DEFAULT_IMAGES)};"
                                         f" --full: {','.join(FULL_IMAGES)}); crops' top-left corners {CROPS}, "
                                         "moved up and left where a larger crop needs it")
    parser.add_argument("--crop-size", type=int, default=128,
                        help="side of the high-resolution crop, a multiple of 64 up to 256 (the model sees it "
                             "down-scaled x2; default 128)")
    parser.add_argument("--configuration", action="append", metavar="NAME",
                        help="run only this configuration (repeatable; names as --list prints them; 'exact' always "
                             "runs)")
    parser.add_argument("--repeats", type=int, help="timed replays per configuration (default 2; --full: 3; 0: "
                                                    "no timing, the time columns NaN)")
    parser.add_argument("--floor-windows", type=int, default=1,
                        help="windows without a mask per layer whose floor and kernel errors are measured "
                             "(default 1; 0: none)")
    parser.add_argument("--floor-images", type=int, default=1, help="images whose windows are measured (default 1)")
    parser.add_argument("--clamp-threshold", type=float, default=5.0,
                        help="τ of the clamped kernel (default 5, the authors' SwinIR code)")
    parser.add_argument("--window-grid", choices=("square", "aspect"), default="square",
                        help="window-pool grid: square (closest-square factors of m, the authors' code; default) or "
                             "aspect (the window's aspect ratio)")
    parser.add_argument("--threads", type=int, default=2, help="torch and library threads (default 2)")
    parser.add_argument("--list", action="store_true", help="print the configurations of the run and exit")
    parser.add_argument("--quiet", "-q", action="store_true")
    args = parser.parse_args(argv)

    models = tuple(filter(None, (args.models or ("8x32,32x32" if args.full else "8x32")).split(",")))
    images = tuple(filter(None, (args.images or ",".join(FULL_IMAGES if args.full else DEFAULT_IMAGES)).split(",")))
    for model in models:
        if model not in MODEL_WINDOWS:
            parser.error(f"--models: unknown window model {model!r} (expected {', '.join(MODEL_WINDOWS)})")
    for image in images:
        if image not in CROPS:
            parser.error(f"--images: unknown image {image!r} (expected one of {', '.join(CROPS)})")
    if args.crop_size < 64 or args.crop_size % 64 or args.crop_size > 256:
        parser.error(f"--crop-size {args.crop_size}: must be a multiple of 64 (the low-resolution image a multiple "
                     "of the 32-token window side) up to 256 (the smallest image's 300 rows)")
    if args.repeats is not None and args.repeats < 0:
        parser.error(f"--repeats {args.repeats}: must be 0 or more")
    if args.threads < 1:
        parser.error(f"--threads {args.threads}: must be 1 or more")
    if not math.isfinite(args.clamp_threshold):
        parser.error(f"--clamp-threshold {args.clamp_threshold}: τ must be a finite number")
    grid = configurations(args.full, args.window_grid, args.clamp_threshold)
    if args.configuration:
        wanted = set(args.configuration) | {EXACT.name}
        unknown = wanted - {c.name for c in grid}
        if unknown:
            parser.error(f"--configuration: unknown {sorted(unknown)}; known: {[c.name for c in grid]}")
        grid = [c for c in grid if c.name in wanted]
    if args.list:
        print("\n".join(c.name for c in grid))
        parser.exit()
    return Options(output=args.output.resolve(), models=models, images=images, crop_size=args.crop_size,
                   configurations=grid,
                   repeats=args.repeats if args.repeats is not None else (3 if args.full else 2),
                   floor_images=args.floor_images,
                   floor_windows=args.floor_windows, threads=args.threads, clamp_threshold=args.clamp_threshold,
                   window_grid=args.window_grid,
                   command_line=shlex.join([Path(sys.argv[0]).name, *(sys.argv[1:] if argv is None else argv)]),
                   quiet=args.quiet)


def main(argv: list[str] | None = None) -> int:
    options = parse(argv)
    missing = vm.missing_package()
    if missing is not None:
        print(f"vision_end_to_end: {missing}", file=sys.stderr)
        return 2
    torch.set_num_threads(options.threads)
    nystrom.set_threads(options.threads)
    log = (lambda text: None) if options.quiet else (lambda text: print(text, flush=True))
    start_load = os.getloadavg()
    start = time.perf_counter()
    rows, windows = run(options, log)
    write_results(options, rows, windows, (start_load, os.getloadavg()))
    log(f"wrote {options.output} ({len(rows)} rows, {len(windows)} window rows) in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
