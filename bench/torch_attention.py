#!/usr/bin/env python3
"""Torch timings of batched attention, comparable to `nystrom bench --batch` (the /bench_batch table,
docs/formats.md §2.3): exact attention by torch.nn.functional.scaled_dot_product_attention and PnP-Nystra as
the authors' torch code computes it (Srinivas-512/PnP_Nystra: segment-means landmarks by adaptive average pooling,
the clamped exp exp(min(x, 5)) + max(x − 5, 0) in all three blocks, Razavi's iteration from the batch's
Z₀ = Aᵀ/(max column sum · max row sum), output P(G_U V) / (P(G_U 1) + 1e-12) with P = G_L Z), on Gaussian
[B, H, N, d] tensors (dv = d), float32, on the CPU and on CUDA when available.

    .venv/bin/python bench/torch_attention.py --batch 64x6x1024x64 --threads 2 [--landmarks 16] [--repeat 5]

Prints one row per shape, device and method: best and median seconds over --repeat runs after a warm-up
(CUDA: synchronized; tensors already on the device, so copy_seconds is 0), speedup over exact attention in the
same run, heads per second and the relative output error against exact attention. Timings are on whatever else the
machine is doing; compare ratios measured in one run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch


def pnp_nystra_torch(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: int, iterations: int) -> torch.Tensor:
    """PnP-Nystra attention as the authors' torch code computes it, for [..., N, d] tensors."""
    scale = q.shape[-1] ** -0.5

    def landmarks(x):
        pooled = torch.nn.functional.adaptive_avg_pool1d(x.reshape(-1, *x.shape[-2:]).transpose(-1, -2), m)
        return pooled.transpose(-1, -2).reshape(*x.shape[:-2], m, x.shape[-1])

    def clamped_kernel(a, b):
        logits = scale * a @ b.transpose(-1, -2)
        return torch.exp(torch.clamp(logits, max=5)) + torch.clamp(logits - 5, min=0)

    def iterative_inverse(a):
        eye = torch.eye(a.shape[-1], dtype=a.dtype, device=a.device)
        alpha = 1 / (torch.max(torch.sum(torch.abs(a), dim=-2)) * torch.max(torch.sum(torch.abs(a), dim=-1)))
        z = alpha * a.transpose(-1, -2)
        for _ in range(iterations):
            az = a @ z
            z = (0.25 * z) @ (13 * eye - az @ (15 * eye - az @ (7 * eye - az)))
        return z

    q_bar, k_bar = landmarks(q), landmarks(k)
    left, core, upper = clamped_kernel(q, k_bar), clamped_kernel(q_bar, k_bar), clamped_kernel(q_bar, k)
    p = left @ iterative_inverse(core)
    return (p @ (upper @ v)) / (p @ upper.sum(dim=-1, keepdim=True) + 1e-12)


def parse_shape(text: str) -> tuple[int, int, int, int]:
    parts = text.split("x")
    if len(parts) != 4 or not all(part.isdigit() and int(part) >= 1 for part in parts):
        raise argparse.ArgumentTypeError(f"--batch: '{text}' is not BxHxNxd with every count >= 1")
    return tuple(int(part) for part in parts)


def timings(function, device: torch.device, repeat: int) -> tuple[float, float]:
    """Best and median seconds of `function` over `repeat` runs after a warm-up."""
    def once() -> float:
        start = time.perf_counter()
        function()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    once()
    seconds = [once() for _ in range(repeat)]
    return min(seconds), statistics.median(seconds)


def bench_shape(shape: tuple[int, int, int, int], device: torch.device, m: int, repeat: int) -> None:
    b, h, n, d = shape
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, h, n, d, generator=generator).to(device) for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention
    methods = {"exact (sdpa)": lambda: sdpa(q, k, v), "pnp-nystra (torch)": lambda: pnp_nystra_torch(q, k, v, m, 6)}
    exact = sdpa(q, k, v).double()
    exact_best = None
    for name, function in methods.items():
        best, median = timings(function, device, repeat)
        exact_best = exact_best or best
        error = (torch.linalg.vector_norm(function().double() - exact) / torch.linalg.vector_norm(exact)).item()
        print(f"{device.type:>6} {name:<20} {b}x{h}x{n}x{d:<6} {torch.get_num_threads():>3} {best:11.3e} "
              f"{median:11.3e} {0.0:9.1e} {exact_best / best:8.2f} {b * h / best:9.0f} {error:10.2e}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", default="64x6x1024x64", help="comma-separated BxHxNxd shapes (dv = d)")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--landmarks", type=int, default=16, help="m of PnP-Nystra")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs after the warm-up")
    parser.add_argument("--cpu-only", action="store_true", help="skip CUDA even when available")
    arguments = parser.parse_args()
    try:
        shapes = [parse_shape(text) for text in arguments.batch.split(",")]
    except argparse.ArgumentTypeError as error:
        print(f"torch_attention.py: {error}", file=sys.stderr)
        return 2
    smallest = min(shape[2] for shape in shapes)
    problems = []
    if arguments.repeat < 1:
        problems.append(f"--repeat {arguments.repeat} must be >= 1")
    if not 1 <= arguments.landmarks <= smallest:
        problems.append(f"--landmarks {arguments.landmarks} must be >= 1 and at most the smallest N = {smallest}")
    if arguments.threads < 0:
        problems.append(f"--threads {arguments.threads} must be >= 0")
    for problem in problems:
        print(f"torch_attention.py: {problem}", file=sys.stderr)
    if problems:
        return 2
    if arguments.threads:
        torch.set_num_threads(arguments.threads)
    devices = [torch.device("cpu")]
    if torch.cuda.is_available() and not arguments.cpu_only:
        devices.append(torch.device("cuda"))
    print(f"torch {torch.__version__}, float32, m = {arguments.landmarks}, best/median of {arguments.repeat}")
    print("device method               BxHxNxd       thr     best(s)   median(s)   copy(s)  speedup   heads/s"
          "  rel.error")
    with torch.inference_mode():
        for device in devices:
            for shape in shapes:
                bench_shape(shape, device, arguments.landmarks, arguments.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
