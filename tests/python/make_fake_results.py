#!/usr/bin/env python3
"""Writes small, plausible `nystrom` results files (docs/formats.md §2) for testing the notebooks without the C++
program: <dir>/sweep.h5 (a /sweep table), <dir>/spectrum.h5 (/spectra/<layer>/...), <dir>/bench.h5 (the /bench
and /bench_steps tables of `nystrom bench`, and its optional /bench_gemm and /bench_matvec) and <dir>/vision.h5 (the
/vision and /vision_windows tables of notebooks/vision_end_to_end.py, docs/formats.md §2.5).

    make_fake_results.py OUT_DIR [--minimal] [--methods pnp-nystra,nystromformer,...] [--seed 0]

The files are results format_version 3 (performer's r in `features`, linformer's k in `projected`, `landmarks` = m, in
/sweep and /bench; the /bench tables' `precision` float or double), sweep.h5 version 4: besides, the switch columns,
`oversampling`, the optimality and certificate columns (`optimal_error` … `optimality_ratio_upper`,
`attention_relative_error`, `attention_optimal_error`) and the rounding counts, every point in the precisions double,
half and bfloat16, some half points with non-finite outputs.
--minimal writes only what docs/formats.md §2 requires, as format_version 1 (the required /sweep columns, performer's and
linformer's sizes in `landmarks`; sv_G, sv_S, sv_Gext with attrs k, N), so that tests show the notebooks do not
depend on the extra columns and datasets `nystrom` writes besides and still read version 1 files; its
bench.h5 is like `nystrom bench --precision float --threads 1 --method <methods> --steps 0 --gemm-n 0` of an
older version (format_version 1: `dtype` float32 instead of `precision`, r and k in `landmarks`; no exact rows unless
asked for, no step rows, no device or gemm_fraction column, no /bench_gemm);
its vision.h5 holds the columns the vision notebook reads and three configurations, as vision format version 1
(`dtype` float32 instead of `precision`; version 2 without --minimal). Without --minimal, bench.h5 also has
/bench_batch (two batch shapes).
The numbers are synthetic (geometric singular-value decay, errors falling with the landmark count, time growing as
N² for exact attention and as N for the approximations), not results.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import h5py
import numpy as np

# The required /sweep columns, transcribed from docs/formats.md §2 on purpose rather than imported from
# notebooks/nystrom_results.py: a writer sharing the reader's list could not catch a column the reader gets wrong.
STRING_COLUMNS = ("layer", "kernel", "strategy", "pinv", "method")
INT_COLUMNS = ("batch", "head", "n", "d", "landmarks", "pinv_iters", "seed")
FLOAT_COLUMNS = (
    "kernel_param", "spectral_error", "relative_spectral_error", "frobenius_error", "output_relative_error",
    "output_max_error", "output_mean_abs_error", "sigma1_ext", "sigma_m1_ext", "sigma_m_core", "bound_ratio",
    "theorem1_bound", "theorem2_bound", "theorem3_bound", "theorem3_k", "c_emp", "pinv_residual", "seconds",
)
METHODS = ("pnp-nystra", "nystromformer", "cur", "symmetric-nystrom", "performer", "linformer", "exact")
FACTORED = ("pnp-nystra", "symmetric-nystrom", "exact")  # methods with a kernel approximation Ĝ
# The /sweep columns of format version 4 besides the required ones (docs/formats.md §2.1), transcribed likewise.
SWEEP_COLUMNS_4 = (
    ("stabilization", "text"), ("precision", "text"), ("oversampling", "float64"), ("pinv_tolerance", "float64"),
    ("different_indices", "int64"), ("copy_rows", "int64"), ("share_projections", "int64"),
    ("front_padding", "int64"), ("optimal_error", "float64"), ("relative_optimal_error", "float64"),
    ("optimality_ratio", "float64"), ("optimal_error_lower", "float64"), ("spectral_error_lower", "float64"),
    ("spectral_error_upper", "float64"), ("spectral_error_upper_failure", "float64"),
    ("optimality_ratio_upper", "float64"), ("attention_relative_error", "float64"),
    ("attention_optimal_error", "float64"), ("nonfinite_output_rows", "int64"), ("overflowed_entries", "int64"),
    ("underflowed_entries", "int64"), ("nan_entries", "int64"), ("selection_entries", "int64"),
)
# The arithmetic of the fake points (version 4), and each emulated format's own output error (its unit roundoff).
PRECISIONS = ("double", "half", "bfloat16")
FORMAT_ERROR = {"double": 0.0, "float": 0.0, "half": 2.0**-11, "bfloat16": 2.0**-8}
LAYERS = ("00", "01")
HEADS = 2
TOKENS, DIM = 64, 16

# `nystrom bench` tables (experiments/bench.cpp), transcribed for the same reason: column name, type.
BENCH_COLUMNS = (
    ("method", "text"), ("n", "int64"), ("d", "int64"), ("dv", "int64"), ("precision", "text"),
    ("threads", "int64"), ("landmarks", "int64"), ("features", "int64"), ("projected", "int64"), ("seconds", "float64"),
    ("flops", "float64"), ("gflops", "float64"), ("speedup_vs_exact", "float64"), ("output_relative_error", "float64"),
    ("blas_core", "text"),
)
BENCH_DEVICE_COLUMNS = (("gemm_fraction", "float64"), ("device", "text"))  # in /bench since the GEMM reference
BENCH_STEP_COLUMNS = (
    ("step", "text"), ("step_index", "int64"), ("n", "int64"), ("d", "int64"), ("precision", "text"),
    ("threads", "int64"), ("landmarks", "int64"), ("seconds", "float64"), ("fraction", "float64"),
    ("blas_core", "text"),
)
BENCH_GEMM_COLUMNS = (
    ("device", "text"), ("precision", "text"), ("threads", "int64"), ("n", "int64"), ("seconds", "float64"),
    ("gflops", "float64"), ("blas_core", "text"),
)
BENCH_MATVEC_COLUMNS = (
    ("device", "text"), ("precision", "text"), ("threads", "int64"), ("n", "int64"), ("d", "int64"),
    ("seconds", "float64"), ("gflops", "float64"), ("gemm_fraction", "float64"), ("blas_core", "text"),
)
STEPS = ("1 landmarks", "2 G_L", "3 G_A", "4 G_U", "5 pinv", "6 G_U V, G_U 1", "7 P, products, normalization")
BENCH_BATCH_COLUMNS = (
    ("device", "text"), ("precision", "text"), ("threads", "int64"), ("batch", "int64"), ("heads", "int64"),
    ("n", "int64"), ("d", "int64"), ("method", "text"), ("landmarks", "int64"), ("features", "int64"),
    ("projected", "int64"), ("best_seconds", "float64"), ("median_seconds", "float64"), ("copy_seconds", "float64"),
    ("speedup_vs_exact", "float64"), ("heads_per_second", "float64"), ("output_relative_error", "float64"),
    ("blas_core", "text"),
)
BATCH_SHAPES = ((64, 6, 1024, 64), (16, 8, 4096, 64))  # B, H, N, d of `--batch 64x6x1024x64,16x8x4096x64`
BENCH_SIZES = tuple(64 * 2**k for k in range(7))  # 64 … 4096
MATVEC_SIZES = (1024, 2048, 4096)
BENCH_LANDMARKS, BENCH_FEATURES, BENCH_DIM, GEMM_N = 16, 64, 64, 4096
BLAS_CORE = "SkylakeX"
DTYPE_OF_PRECISION = {"float": "float32", "double": "float64"}  # the /bench tables before format version 3


def bench_version_1(columns: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """A /bench table's columns as format version 1 wrote them: `dtype` for `precision`, no `features`, `projected`."""
    renamed = (("dtype" if name == "precision" else name, kind) for name, kind in columns)
    return tuple((name, kind) for name, kind in renamed if name not in ("features", "projected"))


def write_table(file: h5py.File, name: str, columns: tuple[tuple[str, str], ...], rows: list[dict]) -> None:
    """A results table as `nystrom` writes it: group `name`, one extendable chunked 1-D dataset per column,
    text as variable-length UTF-8, int64, float64."""
    group = file.create_group(name)
    types = {"text": h5py.string_dtype("utf-8"), "int64": np.int64, "float64": np.float64}
    for column, kind in columns:
        values = np.array([r[column] for r in rows], dtype=object if kind == "text" else types[kind])
        group.create_dataset(column, data=values, dtype=types[kind], maxshape=(None,), chunks=(256,))


def write_root(file: h5py.File, command: str, version: int = 3) -> None:
    file.attrs["format"] = "nystrom-results"
    file.attrs["format_version"] = np.int64(version)
    file.attrs["program_version"] = "0.0.0-fake"
    file.attrs["git_revision"] = "fake"
    file.attrs["command_line"] = command
    file.attrs["created"] = "2026-01-01T00:00:00Z"
    file.attrs["threads"] = np.int64(1)
    file.attrs["input"] = "synthetic:fake"


def sweep_rows(methods: list[str], rng: np.random.Generator, precisions: tuple[str, ...] = ("double",)) -> list[dict]:
    rows = []
    kernels = (("exponential", 1 / np.sqrt(DIM)), ("laplacian", 4.0))
    strategies = ("segment-means", "random")
    pinvs = [("exact", 0)] + [("razavi", i) for i in (2, 4, 6)] + [("newton-schulz", i) for i in (2, 4, 6)]
    for layer, head, (kernel, param), strategy, m, (pinv, iters), method, precision in itertools.product(
        LAYERS, range(HEADS), kernels, strategies, (8, 16, 32), pinvs, methods, precisions
    ):
        if method != "pnp-nystra" and pinv != "exact":
            continue
        sigma1 = 50.0 * (1 + 0.1 * head)
        decay = 0.12 if kernel == "exponential" else 0.08
        sigma_m1 = sigma1 * np.exp(-decay * m)
        core = sigma1 * np.exp(-decay * m * (0.7 if strategy == "segment-means" else 0.9))
        iteration_penalty = 1.0 if iters == 0 else 1 + 8.0 / iters
        error = 0.8 * sigma_m1 * iteration_penalty * (1.5 if method != "pnp-nystra" else 1.0) * rng.uniform(0.8, 1.2)
        factored = method in FACTORED
        ratio = sigma_m1 / core
        theorem3_k = float(rng.uniform(1.1, 4.0))
        row = {
            "layer": layer, "kernel": kernel, "strategy": strategy, "pinv": pinv, "method": method,
            "batch": 0, "head": head, "n": TOKENS, "d": DIM, "landmarks": m, "pinv_iters": iters, "seed": 7,
            "kernel_param": param,
            "spectral_error": error if factored else np.nan,
            "relative_spectral_error": error / sigma1 if factored else np.nan,
            "frobenius_error": 2.5 * error if factored else np.nan,
            "output_relative_error": 0.05 * error / sigma_m1 * np.exp(-0.03 * m) + FORMAT_ERROR[precision],
            "precision": precision,
            "output_max_error": 0.1 * np.exp(-0.03 * m),
            "output_mean_abs_error": 0.01 * np.exp(-0.03 * m),
            "sigma1_ext": sigma1, "sigma_m1_ext": sigma_m1, "sigma_m_core": core,
            "bound_ratio": ratio,
            "theorem1_bound": sigma1**2 / (core - sigma_m1) * ratio if core > sigma_m1 else np.nan,
            "theorem2_bound": 2 * sigma1**2 * sigma_m1 / core**2,
            "theorem3_bound": theorem3_k * sigma_m1 if theorem3_k * sigma_m1 < core else np.nan,
            "theorem3_k": theorem3_k,
            "c_emp": error * core / sigma_m1 if factored else np.nan,
            "pinv_residual": 0.0 if iters == 0 else 3.0 * 0.5**iters,
            "seconds": 1e-3 * m,
        }
        if not factored:
            for name in ("bound_ratio", "theorem1_bound", "theorem2_bound", "theorem3_bound", "theorem3_k", "c_emp"):
                row[name] = np.nan
        rows.append(row)
    return rows


def version_4_columns(row: dict) -> dict:
    """The version 4 columns of a fake /sweep row (docs/formats.md §2.1), consistent with its errors: the rank-m
    floor σ_{m+1} below the error (Eckart–Young), the certified interval around it, the floor's certified lower
    bound below it; in half, the m = 32 points of head 1 with non-finite outputs (as overflow gives)."""
    exact = row["method"] == "exact"
    floor = np.nan if exact else 0.5 * row["sigma_m1_ext"]  # σ_{m+1}(G) ≤ σ_{m+1}(G̃) (interlacing)
    error = row["spectral_error"]
    emulated = row["precision"] in ("half", "bfloat16")
    broken = row["precision"] == "half" and row["landmarks"] == 32 and row["head"] == 1 and row["method"] in FACTORED
    values = {
        "stabilization": "row-max" if row["method"] == "pnp-nystra" else "none", "oversampling": 1.0,
        "pinv_tolerance": 0.0, "different_indices": 0, "copy_rows": 0, "share_projections": 0, "front_padding": 0,
        "optimal_error": floor, "relative_optimal_error": floor / row["sigma1_ext"],
        "optimality_ratio": error / floor, "optimal_error_lower": 0.98 * floor,
        "spectral_error_lower": 0.999 * error, "spectral_error_upper": 1.04 * error,
        "spectral_error_upper_failure": np.nan if exact else 1e-6,
        "optimality_ratio_upper": 1.04 * error / (0.98 * floor),
        "attention_relative_error": np.nan if exact else 1.5 * row["relative_spectral_error"],
        "attention_optimal_error": np.nan if exact else 1.2 * floor / row["sigma1_ext"],
        "nonfinite_output_rows": 3 if broken else 0, "overflowed_entries": 12 if broken else 0,
        "underflowed_entries": 40 if emulated else 0, "nan_entries": 9 if broken else 0,
        "selection_entries": 0,  # segment-means and random evaluate no kernel entries
    }
    if broken:
        values.update(output_relative_error=np.nan, output_max_error=np.nan, output_mean_abs_error=np.nan)
    return values


def write_sweep(path: Path, methods: list[str], minimal: bool, rng: np.random.Generator) -> None:
    rows = sweep_rows(methods, rng, ("double",) if minimal else PRECISIONS)
    with h5py.File(path, "w") as file:
        write_root(file, "nystrom sweep (fake)", 1 if minimal else 4)
        columns = tuple((c, "text") for c in STRING_COLUMNS) + tuple((c, "int64") for c in INT_COLUMNS)
        if not minimal:  # version 2: performer's r and linformer's k in their own columns, `landmarks` = m
            for row in rows:
                row.update(version_4_columns(row))
                row["features"] = row["landmarks"] if row["method"] == "performer" else 0
                row["projected"] = row["landmarks"] if row["method"] == "linformer" else 0
                if row["method"] in ("performer", "linformer", "exact"):  # no landmarks, no core to invert
                    row.update(landmarks=0, pinv="none")
            columns += (("features", "int64"), ("projected", "int64")) + SWEEP_COLUMNS_4
        write_table(file, "sweep", columns + tuple((c, "float64") for c in FLOAT_COLUMNS), rows)
        if not minimal:  # extra columns `nystrom sweep` writes besides the required ones
            for n in (1, 2, 3):
                bound = np.array([r[f"theorem{n}_bound"] for r in rows])
                file["sweep"].create_dataset(f"theorem{n}_applies", data=np.isfinite(bound).astype(np.int64))


def write_spectrum(path: Path, minimal: bool, rng: np.random.Generator) -> None:
    k = 50
    with h5py.File(path, "w") as file:
        write_root(file, "nystrom spectrum (fake)")
        for depth, layer in enumerate(LAYERS):
            group = file.create_group(f"spectra/{layer}")
            index = np.arange(k)
            matrices = {"G": 0.10, "S": 0.25, "Gext": 0.09}
            if not minimal:
                matrices["attn"] = 0.25 + 0.05 * depth
            for name, rate in matrices.items():
                sv = np.empty((1, HEADS, k))
                for head in range(HEADS):
                    sv[0, head] = rng.uniform(5, 50) * np.exp(-rate * (1 + 0.2 * head) * index)
                group.create_dataset(f"sv_{name}", data=sv)
                if not minimal:
                    group.create_dataset(f"decay_{name}", data=sv / sv[..., :1])
                    group.create_dataset(f"rank_{name}", data=(sv > 1e-6 * sv[..., :1]).sum(axis=-1).astype(np.int64))
            group.attrs["k"] = np.int64(k)
            group.attrs["N"] = np.int64(TOKENS)
            if not minimal:
                group.attrs["d"] = np.int64(DIM)
                group.attrs["kernel"] = "exponential"
                group.attrs["rank_tol"] = 1e-6
                group.attrs["landmarks"] = np.int64(16)


def bench_rows(methods: list[str], minimal: bool, rng: np.random.Generator) -> dict[str, list[dict]]:
    """Rows of /bench, /bench_steps and (unless minimal) /bench_gemm and /bench_matvec, in bench's loop order
    (precision, threads; GEMM, then per N exact first, then the matvecs, then the batches of heads); exact attention
    is timed for the speedups even without its own rows. Minimal: format version 1 (`dtype` float32, r and k in
    `landmarks`)."""
    precisions, thread_counts = (["float"], [1]) if minimal else (["float", "double"], [1, 2])
    listed = methods if minimal else ["exact", *methods]
    tables = {"bench": [], "bench_steps": [], "bench_gemm": [], "bench_matvec": [], "bench_batch": []}
    for precision, threads in itertools.product(precisions, thread_counts):
        peak = 250e9 * threads * (1.0 if precision == "float" else 0.5)  # GEMM rate, flop/s
        where = {"dtype": DTYPE_OF_PRECISION[precision]} if minimal else {"precision": precision}
        where.update(threads=threads, blas_core=BLAS_CORE)
        if not minimal:
            gemm_seconds = 2.0 * GEMM_N**3 / peak
            tables["bench_gemm"].append({"device": "cpu", "n": GEMM_N, "seconds": gemm_seconds,
                                         "gflops": 2.0 * GEMM_N**3 / gemm_seconds * 1e-9, **where})
        for n in BENCH_SIZES:
            exact_flops = 4.0 * n * n * BENCH_DIM
            exact_seconds = exact_flops / (0.7 * peak) + 2e-6
            for method in dict.fromkeys(["exact", *methods]):  # exact first, as bench orders them
                if method not in listed:
                    continue
                size = {"exact": 0, "performer": BENCH_FEATURES, "linformer": BENCH_FEATURES}.get(method)
                size = BENCH_LANDMARKS if size is None else size
                flops = exact_flops if method == "exact" else 2.0 * n * size * (4 * BENCH_DIM + size)
                seconds = exact_seconds if method == "exact" else flops / (0.2 * peak) + 2e-5 * rng.uniform(0.9, 1.1)
                row = {"method": method, "n": n, "d": BENCH_DIM, "dv": BENCH_DIM, "landmarks": size,
                       "seconds": seconds, "flops": flops, "gflops": flops / seconds * 1e-9,
                       "speedup_vs_exact": exact_seconds / seconds,
                       "output_relative_error": 0.0 if method == "exact" else 0.02 * (1 + METHODS.index(method))
                       * rng.uniform(0.8, 1.2), **where}
                if not minimal:  # version 3: m, r and k each in its own column, 0 where the method has none
                    row.update(gemm_fraction=row["gflops"] * 1e9 / peak, device="cpu",
                               landmarks=0 if method in ("performer", "linformer") else size,
                               features=size if method == "performer" else 0,
                               projected=size if method == "linformer" else 0)
                tables["bench"].append(row)
            if not minimal:
                weights = rng.uniform(0.5, 1.5, len(STEPS)) * np.array([1, 3, 0.2, 3, 0.5, 2, 3])
                seconds = weights * n * 1e-8
                for index, (step, value) in enumerate(zip(STEPS, seconds)):
                    tables["bench_steps"].append({"step": step, "step_index": index + 1, "n": n, "d": BENCH_DIM,
                                                  "landmarks": BENCH_LANDMARKS, "seconds": value,
                                                  "fraction": value / seconds.sum(), **where})
        for n in MATVEC_SIZES if not minimal else ():
            gflops = 0.3 * peak * 1e-9 * n / (n + 512) * rng.uniform(0.9, 1.1)
            tables["bench_matvec"].append({"device": "cpu", "n": n, "d": BENCH_DIM,
                                           "seconds": 2.0 * n * n * BENCH_DIM / (gflops * 1e9), "gflops": gflops,
                                           "gemm_fraction": gflops * 1e9 / peak, **where})
        for batch, heads, n, d in BATCH_SHAPES if not minimal else ():
            exact_seconds = batch * heads * 4.0 * n * n * d / (0.7 * peak)
            for method in dict.fromkeys(["exact", *methods]):
                size = BENCH_FEATURES if method in ("performer", "linformer") else BENCH_LANDMARKS
                seconds = (exact_seconds if method == "exact"
                           else batch * heads * 2.0 * n * size * (4 * d + size) / (0.2 * peak))
                tables["bench_batch"].append({
                    "device": "cpu", "batch": batch, "heads": heads, "n": n, "d": d, "method": method,
                    "landmarks": 0 if method in ("exact", "performer", "linformer") else size,
                    "features": size if method == "performer" else 0,
                    "projected": size if method == "linformer" else 0, "best_seconds": seconds,
                    "median_seconds": seconds * rng.uniform(1.0, 1.1), "copy_seconds": 0.0,
                    "speedup_vs_exact": exact_seconds / seconds, "heads_per_second": batch * heads / seconds,
                    "output_relative_error": 0.0 if method == "exact" else 0.02 * (1 + METHODS.index(method)),
                    **where})
    return tables


def write_bench(path: Path, methods: list[str], minimal: bool, rng: np.random.Generator) -> None:
    tables = bench_rows(methods, minimal, rng)
    with h5py.File(path, "w") as file:
        write_root(file, "nystrom bench (fake)", 1 if minimal else 3)
        file.attrs["input"] = "synthetic:gaussian"
        file.attrs["blas_core"] = BLAS_CORE
        if not minimal:
            file.attrs["device"] = "cpu"
            file.attrs["device_description"] = "fake CPU"
            file.attrs["timing"] = "one head on the host, minimum over repeats; threads = OpenMP and OpenBLAS threads"
        columns = bench_version_1(BENCH_COLUMNS) if minimal else BENCH_COLUMNS + BENCH_DEVICE_COLUMNS
        write_table(file, "bench", columns, tables["bench"])
        write_table(file, "bench_steps", bench_version_1(BENCH_STEP_COLUMNS) if minimal else BENCH_STEP_COLUMNS,
                    tables["bench_steps"])
        if not minimal:
            write_table(file, "bench_gemm", BENCH_GEMM_COLUMNS, tables["bench_gemm"])
            write_table(file, "bench_matvec", BENCH_MATVEC_COLUMNS, tables["bench_matvec"])
            write_table(file, "bench_batch", BENCH_BATCH_COLUMNS, tables["bench_batch"])

# notebooks/vision_end_to_end.py tables (docs/formats.md §2.5), transcribed likewise; the first set is what the
# vision notebook reads (--minimal writes only those).
VISION_COLUMNS = (
    ("model_window", "text"), ("image", "text"), ("n", "int64"), ("configuration", "text"), ("method", "text"),
    ("landmarks", "int64"), ("strategy", "text"), ("pinv", "text"), ("pinv_iters", "int64"),
    ("stabilization", "text"), ("masks", "text"), ("precision", "text"), ("psnr", "float64"), ("ssim", "float64"),
    ("psnr_drop", "float64"), ("ssim_drop", "float64"), ("psnr_vs_unmodified", "float64"),
    ("seconds_per_block", "float64"), ("exact_seconds_per_block", "float64"),
    ("unmodified_seconds_per_block", "float64"), ("time_ratio", "float64"), ("time_ratio_unmodified", "float64"),
    ("non_finite", "int64"),
)
VISION_EXTRA_COLUMNS = (
    ("crop_top", "int64"), ("crop_left", "int64"), ("crop_size", "int64"),
    ("clamp_threshold", "float64"), ("window_grid", "text"), ("ssim_vs_unmodified", "float64"),
    ("max_abs_difference", "float64"), ("forward_seconds", "float64"), ("attention_calls", "int64"),
)
VISION_WINDOW_COLUMNS = (
    ("model_window", "text"), ("configuration", "text"), ("method", "text"), ("landmarks", "int64"),
    ("strategy", "text"), ("pinv", "text"), ("pinv_iters", "int64"), ("stabilization", "text"), ("layer", "int64"),
    ("window", "int64"), ("head", "int64"), ("rank", "int64"), ("floor", "float64"),
    ("relative_spectral_error", "float64"), ("output_relative_error", "float64"),
)
VISION_WINDOW_EXTRA_COLUMNS = (
    ("image", "text"), ("clamp_threshold", "float64"), ("window_grid", "text"), ("masks", "text"),
    ("precision", "text"),
    ("module", "text"), ("window_shape", "text"), ("n", "int64"), ("sigma1", "float64"), ("pinv_status", "text"),
)


def vision_configurations(minimal: bool) -> list[dict]:
    """(name, method, m, pinv, iterations, stabilization) of a vision grid, the unmodified model first."""
    grid = [("unmodified", "model", 0, "none", 0, "none"), ("exact", "exact", 0, "none", 0, "none"),
            ("pnp-nystra m=16, razavi×6, row-max", "pnp-nystra", 16, "razavi", 6, "row-max")]
    if not minimal:
        grid += [(f"pnp-nystra m={m}, razavi×6, row-max", "pnp-nystra", m, "razavi", 6, "row-max") for m in (8, 32)]
        grid += [(f"pnp-nystra m=16, razavi×{i}, row-max", "pnp-nystra", 16, "razavi", i, "row-max") for i in (1, 3)]
        grid += [("pnp-nystra m=16, exact pinv, row-max", "pnp-nystra", 16, "exact", 0, "row-max"),
                 ("pnp-nystra m=16, razavi×6, clamped τ=5", "pnp-nystra", 16, "razavi", 6, "clamped"),
                 ("pnp-nystra m=16, razavi×6, none", "pnp-nystra", 16, "razavi", 6, "none"),
                 ("exact attention, clamped kernel τ=5", "pnp-nystra", -1, "exact", 0, "clamped"),
                 ("nystromformer m=16", "nystromformer", 16, "razavi", 6, "none"),
                 ("performer r=16", "performer", 16, "none", 0, "none"), ("cur m=16", "cur", 16, "exact", 0, "none")]
    keys = ("configuration", "method", "landmarks", "pinv", "pinv_iters", "stabilization")
    return [dict(zip(keys, entry)) for entry in grid]


def write_vision(path: Path, minimal: bool, rng: np.random.Generator) -> None:
    models = ("8x32",) if minimal else ("8x32", "32x32")
    rows, windows = [], []
    for model, image in itertools.product(models, ("astronaut", "coffee")):
        exact_seconds, own_seconds, psnr0 = rng.uniform(0.01, 0.02), rng.uniform(0.02, 0.04), rng.uniform(30, 36)
        for c in vision_configurations(minimal):
            broken = c["stabilization"] == "none" and c["method"] == "pnp-nystra"  # non-finite, as measured
            m = c["landmarks"]
            drop = 0.0 if c["method"] in ("model", "exact") or m < 0 else 8.0 / m * rng.uniform(0.5, 1.5)
            seconds = {"model": own_seconds, "exact": exact_seconds}.get(c["method"], 1e-3 * m * rng.uniform(0.5, 1))
            rows.append(dict(c, model_window=model, image=image, crop_top=40, crop_left=160, crop_size=128,
                             n=256 if model == "8x32" else 1024, clamp_threshold=5.0 if c["stabilization"] == "clamped"
                             else np.nan, window_grid="square" if c["method"] == "pnp-nystra" else "none",
                             strategy="window-pool" if c["method"] == "pnp-nystra" else "none",
                             masks="model" if c["method"] == "model" else "regions",
                             precision="double" if m < 0 else "float",
                             psnr=np.nan if broken else psnr0 - drop, ssim=np.nan if broken else 0.95 - drop / 100,
                             psnr_drop=np.nan if broken else drop, ssim_drop=np.nan if broken else drop / 100,
                             psnr_vs_unmodified=np.nan if broken else (np.inf if drop == 0 else 40 - drop),
                             ssim_vs_unmodified=np.nan if broken else 1 - drop / 100,
                             max_abs_difference=np.nan if broken else drop / 100, seconds_per_block=seconds,
                             exact_seconds_per_block=exact_seconds, unmodified_seconds_per_block=own_seconds,
                             time_ratio=seconds / exact_seconds, time_ratio_unmodified=seconds / own_seconds,
                             forward_seconds=1.0, attention_calls=18, non_finite=10**6 if broken else 0))
            if image == "astronaut" and c["method"] not in ("model", "exact"):
                for layer, head in itertools.product(range(3), range(2)):
                    rank = 256 if m < 0 else m
                    floor = 0.0 if m < 0 else rng.uniform(0.5, 1.5) / rank
                    windows.append(dict(c, model_window=model, image=image, layer=layer, window=0, head=head,
                                        rank=rank, floor=floor, relative_spectral_error=floor + rng.uniform(0.1, 0.5),
                                        output_relative_error=rng.uniform(0.05, 0.3), strategy="window-pool",
                                        clamp_threshold=np.nan, window_grid="square", masks="regions",
                                        precision="float", module=f"layers.0.blocks.{layer}.attn.attns.0",
                                        window_shape="8x32", n=256, sigma1=1.0, pinv_status="completed"))
    vision_columns = VISION_COLUMNS + (() if minimal else VISION_EXTRA_COLUMNS)
    window_columns = VISION_WINDOW_COLUMNS + (() if minimal else VISION_WINDOW_EXTRA_COLUMNS)
    if minimal:  # vision format version 1: `precision` was `dtype` (float32, float64)
        vision_columns = tuple(("dtype" if name == "precision" else name, kind) for name, kind in vision_columns)
        for row in rows:
            row["dtype"] = DTYPE_OF_PRECISION[row.pop("precision")]
    with h5py.File(path, "w") as file:
        # The vision tables' own version (formats.md §2.5): 2, or 1 with --minimal.
        write_root(file, "notebooks/vision_end_to_end.py (fake)", 1 if minimal else 2)
        file.attrs["input"] = "fake images"
        write_table(file, "vision", vision_columns, rows)
        write_table(file, "vision_windows", window_columns, windows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output_dir", type=Path)
    parser.add_argument("--minimal", action="store_true", help="only what docs/formats.md §2 requires")
    parser.add_argument("--methods", default="pnp-nystra", help=f"comma-separated, from {','.join(METHODS)}")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    methods = args.methods.split(",")
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        parser.error(f"--methods: unknown {unknown}")
    args.output_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    write_sweep(args.output_dir / "sweep.h5", methods, args.minimal, rng)
    write_spectrum(args.output_dir / "spectrum.h5", args.minimal, rng)
    write_bench(args.output_dir / "bench.h5", methods, args.minimal, rng)
    write_vision(args.output_dir / "vision.h5", args.minimal, rng)


if __name__ == "__main__":
    main()
