#!/usr/bin/python3
"""Time one sweep point (N = 1024, d = 64, m = 16, exponential kernel, segment-means landmarks, exact pinv, row-max
stabilization; every column including sigma_{m+1}(G~) and the bounds) in `nystrom sweep` against a straightforward numpy
implementation of the same formulas (docs/mathematics.md) with full SVDs, in the same run, and print the speed-up;
exit status 1 where a value disagrees beyond 1e-8 relative.

The C++ time is the row's `elapsed_seconds`: all the work of a one-point sweep (the head reference, the landmark terms
and the point; with two or more threads the landmark terms run beside the other two). The process wall time
(start-up and HDF5 I/O included) is printed too.
Both sides use the same dump and the machine's cores (OpenBLAS threads for numpy, --threads for nystrom).

usage: /usr/bin/python3 bench/sweep_point_numpy.py [--binary build/bin/nystrom] [--repeats 3] [--threads 0]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np


def numpy_point(q, k, v, scale, m):
    """Every sweep column of one point, the straightforward way: dense N x N matrices and full SVDs (docs/mathematics.md §2-3)."""
    n = q.shape[0]
    sv = lambda a: np.linalg.svd(a, compute_uv=False)
    g = np.exp(scale * q @ k.T)
    g_norm = sv(g)[0]
    # Segment means (N % m == 0 here): the landmarks.
    q_bar = q.reshape(m, n // m, -1).mean(axis=1)
    k_bar = k.reshape(m, n // m, -1).mean(axis=1)
    # Row-max stabilized blocks (PnP-Nystra eq. (8)) and the exact pseudoinverse.
    logits_l, logits_a, logits_u = scale * q @ k_bar.T, scale * q_bar @ k_bar.T, scale * q_bar @ k.T
    row_l, row_u = logits_l.max(axis=1, keepdims=True), logits_u.max(axis=1, keepdims=True)
    left, core, upper = np.exp(logits_l - row_l), np.exp(logits_a - row_u), np.exp(logits_u - row_u)
    z = np.linalg.pinv(core, rcond=m * np.finfo(float).eps)
    g_hat = np.exp(row_l) * (left @ z @ upper)
    error = g - g_hat
    spectral_error = sv(error)[0]
    frobenius_error = np.linalg.norm(error)
    # Outputs: exact attention and PnP-Nystra Algorithm 1.
    exact = (g @ v) / g.sum(axis=1, keepdims=True)
    p = left @ z
    approx = (p @ (upper @ v)) / (p @ upper.sum(axis=1, keepdims=True))
    diff = exact - approx
    output = (np.linalg.norm(diff) / np.linalg.norm(exact), np.abs(diff).max(), np.abs(diff).mean())
    # Landmark terms on the unstabilized blocks: sigma(G~), sigma_m(G_A), K of theorem 3.
    g_l, g_a, g_u = np.exp(logits_l), np.exp(logits_a), np.exp(logits_u)
    extended = np.block([[g_a, g_u], [g_l, g]])
    sigma_ext = sv(extended)
    sigma1, sigma_m1 = sigma_ext[0], sigma_ext[m]
    a = sv(g_a)[m - 1]
    g_a_inv = np.linalg.inv(g_a)
    k3 = (1 + sv(g_l @ g_a_inv)[0]) * (1 + sv(g_a_inv @ g_u)[0])
    ratio = sigma_m1 / a
    theorem1 = sigma1**2 / (a - sigma_m1) * ratio if a > sigma_m1 else np.nan
    theorem2 = 2 * sigma1**2 * sigma_m1 / a**2
    theorem3 = k3 * sigma_m1 if k3 * sigma_m1 < a else np.nan
    c_emp = spectral_error * a / sigma_m1
    residual = np.linalg.norm(np.eye(m) - core @ z)
    return dict(spectral_error=spectral_error, relative_spectral_error=spectral_error / g_norm,
                frobenius_error=frobenius_error, output_relative_error=output[0], sigma1_ext=sigma1,
                sigma_m1_ext=sigma_m1, sigma_m_core=a, theorem1=theorem1, theorem2=theorem2, theorem3=theorem3,
                c_emp=c_emp, c_emp_normalized=c_emp / sigma1**2, pinv_residual=residual)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--binary", default=os.path.join(root, "build", "bin", "nystrom"))
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs on each side")
    parser.add_argument("--threads", type=int, default=0, help="nystrom --threads (0: OpenMP default)")
    args = parser.parse_args()
    n, d, m = 1024, 64, 16
    with tempfile.TemporaryDirectory() as tmp:
        dump = os.path.join(tmp, "bench.h5")
        subprocess.run([args.binary, "synth", "-o", dump, "--layers", "1", "--heads", "1", "--tokens", str(n),
                        "--dim", str(d), "--value-dim", str(d), "--precision", "double", "--seed", "0"], check=True,
                       stderr=subprocess.DEVNULL)
        cpp_times, cpp_walls, row = [], [], None
        for r in range(args.repeats):
            out = os.path.join(tmp, f"sweep{r}.h5")
            start = time.perf_counter()
            subprocess.run([args.binary, "sweep", "-i", dump, "-o", out, "--kernel", "exp", "--strategy",
                            "segment-means", "--landmarks", str(m), "--pinv", "exact", "--stabilization", "row-max",
                            "--threads", str(args.threads), "-q"], check=True)
            cpp_walls.append(time.perf_counter() - start)
            with h5py.File(out, "r") as f:
                s = f["sweep"]
                row = {key: s[key][0] for key in s.keys()}
                cpp_times.append(row["elapsed_seconds"])
        with h5py.File(dump, "r") as f:
            layer = f["layers/00"]
            q, k, v = (np.asarray(layer[x][0, 0], dtype=np.float64) for x in ("q", "k", "v"))
            scale = float(layer.attrs["scale"])
        numpy_times, result = [], None
        for _ in range(args.repeats):
            start = time.perf_counter()
            result = numpy_point(q, k, v, scale, m)
            numpy_times.append(time.perf_counter() - start)
    print(f"one sweep point, N = {n}, d = {d}, m = {m} (exp kernel, segment-means, exact pinv, row-max), "
          f"best of {args.repeats}")
    # Agreement: 1e-8 relative, above a rounding floor of 1e-12 (times sigma_1(G~) for kernel-valued columns).
    columns = {"spectral_error": "spectral_error", "relative_spectral_error": "relative_spectral_error",
               "frobenius_error": "frobenius_error", "output_relative_error": "output_relative_error",
               "sigma1_ext": "sigma1_ext", "sigma_m1_ext": "sigma_m1_ext", "sigma_m_core": "sigma_m_core",
               "theorem1": "theorem1_bound", "theorem2": "theorem2_bound", "theorem3": "theorem3_bound",
               "c_emp": "c_emp", "pinv_residual": "pinv_residual"}
    unitless = ("relative_spectral_error", "output_relative_error", "pinv_residual")
    disagree = []
    for key, column in columns.items():
        ours, theirs = float(row[column]), float(result[key])
        floor = 1e-12 * (1 if key in unitless else result["sigma1_ext"])
        tolerance = 1e-8 * max(abs(ours), abs(theirs)) + floor
        agree = (np.isnan(ours) and np.isnan(theirs)) or abs(ours - theirs) <= tolerance
        print(f"  {column:24s} nystrom {ours:.12e}   numpy {theirs:.12e}{'' if agree else '   DISAGREE'}")
        if not agree:
            disagree.append(column)
    cpp, wall, ref = min(cpp_times), min(cpp_walls), min(numpy_times)
    print(f"nystrom sweep point : {cpp * 1e3:9.1f} ms   (process wall time incl. start-up and I/O {wall * 1e3:.1f} ms)")
    print(f"numpy full SVDs     : {ref * 1e3:9.1f} ms")
    print(f"speed-up            : {ref / cpp:9.1f}x   (vs process wall time {ref / wall:.1f}x)")
    if disagree:
        print(f"the values of {', '.join(disagree)} disagree beyond 1e-8 relative", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
