#!/usr/bin/env python3
"""Benchmark of the Python module `nystrom` (run with .venv/bin/python after scripts/setup-python.sh):

1. Python overhead of one PnP-Nystra attention call (default N = 1024, d = 64, m = 16, float32): the best time of
   nystrom.attention() called from Python (timeit, best of --repeat) minus the best time of the same library call
   repeated in C++ through the same binding (nystrom.time_attention, inputs converted once), for C-ordered arrays
   (numpy's default: read in place as row-major heads) and Fortran-ordered ones (read in place as column-major).
2. The module's PnP-Nystra against the same formulation written in torch on the CPU (default N = 4096, d = 64,
   m = 16, float32, the same thread count): the authors' code (Srinivas-512/PnP_Nystra), i.e. landmarks by adaptive
   average pooling (segment means), the clamped exp exp(min(x, 5)) + max(x − 5, 0) in all three blocks, Razavi's
   iteration from Z₀ = Aᵀ/(max column sum · max row sum), output P(G_U V) / (P(G_U 1) + 1e-12) with P = G_L Z,
   written below. The module runs the same formulation (stabilization="clamped", pinv="razavi"); both outputs are
   checked to agree before timing. pnp_nystra_torch is bench/torch_attention.py's.
3. PnP-Nystra (m = 16, the defaults) on a C-ordered float32 batch [B, H, N, d] (default 64 × 6 × 1024 × 64, the
   SwinIR shape of `nystrom bench --batch`): a new output array per call against `out=` (one array reused). A new
   output is allocated and first touched on every call; its pages are advised as huge pages (4 KiB ones cost about
   a third of the call), and `out=` saves the rest.
4. The dense matrices nystrom.kernel_matrix(q, k) and nystrom.attention_matrix(q, k) (default N = 4096, d = 64, q
   and k of 0.3·N(0, 1) entries), in float64 and float32: each a new N×N array in huge pages.

    .venv/bin/python bench/python_module.py [--threads T] [--repeat R] [--quick]

Timings are best-of, on whatever else the machine is doing; compare ratios measured in one run.
"""

from __future__ import annotations

import argparse
import sys
import timeit

import numpy as np
import torch

import nystrom
from torch_attention import pnp_nystra_torch


def best(function, repeat: int) -> float:
    function()  # warm-up
    return min(timeit.repeat(function, number=1, repeat=repeat))


def inputs(n: int, d: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((n, d), dtype=np.float32) for _ in range(3))


def overhead(n: int, d: int, m: int, repeat: int) -> None:
    options = dict(method="pnp-nystra", landmarks=m, strategy="segment-means", pinv="razavi", pinv_iters=6,
                   stabilization="row-max")
    print(f"1. Python overhead of nystrom.attention, PnP-Nystra, N = {n}, d = {d}, m = {m}, float32, "
          f"{nystrom.threads()} threads, best of {repeat}")
    for layout, convert in (("C order", np.ascontiguousarray), ("Fortran order", np.asfortranarray)):
        q, k, v = (convert(x) for x in inputs(n, d))
        in_cpp = nystrom.time_attention(q, k, v, repeat=repeat, **options)
        from_python = best(lambda: nystrom.attention(q, k, v, **options), repeat)
        print(f"   {layout:>13}: C++ call {1e6 * in_cpp:8.1f} us, Python call {1e6 * from_python:8.1f} us, "
              f"overhead {1e6 * (from_python - in_cpp):6.1f} us")


def against_torch(n: int, d: int, m: int, repeat: int) -> None:
    threads = nystrom.threads()
    torch.set_num_threads(threads)
    q, k, v = inputs(n, d, seed=1)
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    options = dict(method="pnp-nystra", landmarks=m, strategy="segment-means", pinv="razavi", pinv_iters=6,
                   stabilization="clamped")
    with torch.inference_mode():
        reference = pnp_nystra_torch(tq, tk, tv, m, 6).numpy()
        ours = nystrom.attention(q, k, v, **options)
        difference = np.linalg.norm(ours - reference) / np.linalg.norm(reference)
        if not difference < 1e-4:
            sys.exit(f"the module and the torch formulation disagree: relative difference {difference:.2e}")
        seconds_torch = best(lambda: pnp_nystra_torch(tq, tk, tv, m, 6), repeat)
    print(f"2. PnP-Nystra (clamped exp, Razavi x6), N = {n}, d = {d}, m = {m}, float32, {threads} threads "
          f"(torch {torch.__version__}, {torch.get_num_threads()} threads), best of {repeat}; outputs agree to "
          f"{difference:.1e}")
    print(f"   torch {1e3 * seconds_torch:8.3f} ms")
    for layout, convert in (("C order", np.ascontiguousarray), ("Fortran order", np.asfortranarray)):
        q, k, v = (convert(x) for x in (q, k, v))
        seconds_module = best(lambda: nystrom.attention(q, k, v, **options), repeat)
        print(f"   nystrom module, {layout:>13} arrays {1e3 * seconds_module:8.3f} ms: "
              f"{seconds_torch / seconds_module:.1f}x faster than torch")


def batch(shape: tuple[int, int, int, int], m: int, repeat: int) -> None:
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal(shape, dtype=np.float32) for _ in range(3))
    options = dict(method="pnp-nystra", landmarks=m)
    out = np.empty(shape, dtype=np.float32)
    nystrom.attention(q, k, v, out=out, **options)
    if not np.array_equal(out, nystrom.attention(q, k, v, **options)):
        sys.exit("nystrom.attention with out= and without it disagree")
    fresh = best(lambda: nystrom.attention(q, k, v, **options), repeat)
    reused = best(lambda: nystrom.attention(q, k, v, out=out, **options), repeat)
    print(f"3. PnP-Nystra on a {'x'.join(map(str, shape))} batch, m = {m}, float32, {nystrom.threads()} threads, "
          f"best of {repeat}")
    print(f"   a new output per call {1e3 * fresh:8.2f} ms, out= reused {1e3 * reused:8.2f} ms "
          f"({fresh / reused:.2f}x)")


def dense_matrices(n: int, d: int, repeat: int) -> None:
    rng = np.random.default_rng(3)
    print(f"4. Dense N×N matrices, N = {n}, d = {d}, {nystrom.threads()} threads, best of {repeat}")
    for dtype in (np.float64, np.float32):
        q, k = (0.3 * rng.standard_normal((n, d)).astype(dtype) for _ in range(2))
        for name in ("kernel_matrix", "attention_matrix"):
            function = getattr(nystrom, name)
            seconds = best(lambda: function(q, k), repeat)
            print(f"   {name:>16} {np.dtype(dtype).name}: {1e3 * seconds:8.2f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=0, help="OpenMP (and torch) threads (0: the default)")
    parser.add_argument("--repeat", type=int, default=200, help="timed calls; the best counts")
    parser.add_argument("--quick", action="store_true", help="tiny sizes and few repeats (a smoke run)")
    arguments = parser.parse_args()
    if arguments.threads:
        nystrom.set_threads(arguments.threads)
    print(f"nystrom {nystrom.__file__}, OpenBLAS core {nystrom.blas_core()}")
    if arguments.quick:
        overhead(128, 16, 8, 5)
        against_torch(256, 16, 8, 5)
        batch((2, 3, 128, 16), 8, 5)
        dense_matrices(256, 16, 5)
    else:
        overhead(1024, 64, 16, arguments.repeat)
        against_torch(4096, 64, 16, arguments.repeat)
        batch((64, 6, 1024, 64), 16, min(arguments.repeat, 10))
        dense_matrices(4096, 64, min(arguments.repeat, 15))
    return 0


if __name__ == "__main__":
    sys.exit(main())
