"""The module against the `nystrom` program on the same inputs: a small `nystrom sweep` of one head of the bundled
dump (every method, two kernels, several strategies, pseudoinverses and stabilizations), read back with
nystrom.read_results, and every row recomputed through the module's functions and compared column by column:
output errors, ‖G − Ĝ‖ or ‖S − Ŝ‖, the Lemma 2.1 terms and bounds, the pseudoinverse residual; and every row
against nystrom.evaluate, the same record from the same evaluator.

The program is $NYSTROM_CLI (ctest passes build/bin/nystrom), else build/bin/nystrom."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest

import nystrom

REPOSITORY = Path(__file__).resolve().parents[2]
DUMP = REPOSITORY / "data" / "minilm-gettysburg.h5"
LAYER, HEAD = "00", 1
# The program and the module run the same library code; what differs is the thread count of the reductions.
RELATIVE = 1e-9


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    program = Path(os.environ.get("NYSTROM_CLI", REPOSITORY / "build" / "bin" / "nystrom"))
    if not program.is_file():
        pytest.skip(f"the nystrom program {program} is not built (set NYSTROM_CLI)")
    output = tmp_path_factory.mktemp("sweep") / "sweep.h5"
    subprocess.run([str(program), "sweep", "--input", str(DUMP), "--output", str(output), "--layers", LAYER,
                    "--heads", str(HEAD), "--kernel", "exp,laplacian", "--lambda", "3",
                    "--method", ",".join(nystrom.METHODS), "--strategy", "segment-means,step",
                    "--landmarks", "8,16", "--pinv", "exact,razavi", "--iterations", "4",
                    "--stabilization", "row-max,none,clamped", "--quiet"], check=True)
    return nystrom.read_results(output)


@pytest.fixture(scope="module")
def head():
    with h5py.File(DUMP, "r") as file:
        group = file["layers"][LAYER]
        return tuple(np.asarray(group[name][0, HEAD], dtype=np.float64) for name in ("q", "k", "v"))


def options_of(row) -> dict:
    """The module's keyword arguments for a /sweep row (the columns are named like them)."""
    options = {"method": row.method, "kernel": row.kernel, "seed": int(row.seed),
               ("scale" if row.kernel == "exp" else "lambda_"): float(row.kernel_param)}
    for column in ("landmarks", "features", "projected"):
        if getattr(row, column):
            options[column] = int(getattr(row, column))
    if row.strategy != "none":
        options["strategy"] = row.strategy
    if row.pinv != "none":
        options["pinv"] = row.pinv
        if row.pinv_iters:
            options["pinv_iters"] = int(row.pinv_iters)
    if row.method in ("pnp-nystra", "symmetric-nystrom"):
        options["stabilization"] = row.stabilization
    return options


def same(ours, theirs, column, row):
    if np.isnan(theirs):
        assert np.isnan(ours), f"{column}: program NaN, module {ours} ({dict(row._asdict())})"
    else:
        assert ours == pytest.approx(theirs, rel=RELATIVE, abs=1e-14), f"{column} ({row.method}, {options_of(row)})"


def test_the_sweep_covers_every_method(sweep):
    assert set(sweep["method"]) == set(nystrom.METHODS)
    assert sweep.attrs["format"] == "nystrom-results" and "sweep" in sweep.attrs["command_line"]
    assert len(sweep) > 40


def test_every_row_matches_the_module(sweep, head):
    q, k, v = head
    compared = 0
    for row in sweep.itertuples(index=False):
        options = options_of(row)
        kernel = {key: options[key] for key in ("kernel", "scale", "lambda_") if key in options}
        exact = nystrom.attention(q, k, v, method="exact", **kernel)
        approximation = nystrom.approximate(q, k, v, **options)
        errors = nystrom.output_errors(exact, approximation.output)
        same(errors.relative_frobenius, row.output_relative_error, "output_relative_error", row)
        same(errors.max_abs, row.output_max_error, "output_max_error", row)
        same(errors.mean_abs, row.output_mean_abs_error, "output_mean_abs_error", row)
        if row.pinv == "exact":
            # Rounding alone: the program's kernel carries the head's log-shift (docs/mathematics.md §1), so its
            # core G_A is e^{-c} times the module's and the residuals are different rounding errors.
            assert approximation.pinv_residual < 1e-9 and row.pinv_residual < 1e-9
        else:
            same(approximation.pinv_residual, row.pinv_residual, "pinv_residual", row)
        if approximation.factors is not None:
            factors = approximation.factors
            spectral = nystrom.error_norm(q, k, factors, solver="dense")
            same(spectral, row.spectral_error, "spectral_error", row)
            same(spectral / nystrom.kernel_norm(q, k, solver="dense", **kernel), row.relative_spectral_error,
                 "relative_spectral_error", row)
            difference = nystrom.kernel_matrix(q, k, **kernel) - factors.dense()
            same(np.linalg.norm(difference), row.frobenius_error, "frobenius_error", row)
            if row.method == "pnp-nystra":
                terms = nystrom.landmark_terms(q, k, factors)
                bounds = nystrom.evaluate_bounds(terms, spectral)
                for column, value in (("sigma1_ext", terms.sigma1_ext), ("sigma_m1_ext", terms.sigma_m1_ext),
                                      ("sigma_m1_margin", terms.sigma_m1_margin),
                                      ("sigma_m_core", terms.sigma_m_core), ("theorem3_k", terms.theorem3_k),
                                      ("bound_ratio", bounds.ratio), ("theorem1_bound", bounds.theorem1),
                                      ("theorem2_bound", bounds.theorem2), ("theorem3_bound", bounds.theorem3),
                                      ("c_emp", bounds.c_emp)):
                    same(value, getattr(row, column), column, row)
        elif row.method != "exact":
            implied = nystrom.attention_matrix(q, k, **kernel) - approximation.implied_attention()
            same(np.linalg.norm(implied, 2), row.spectral_error, "spectral_error", row)
            same(np.linalg.norm(implied), row.frobenius_error, "frobenius_error", row)
        else:
            assert errors.max_abs == 0 and np.isnan(row.spectral_error)
        compared += 1
    assert compared == len(sweep)


# Columns that differ between two evaluations of the same point: where it is (evaluate() does not know the dump's
# layer, batch and head) and how long it took.
NOT_COMPARED = {"layer", "batch", "head", "seconds", "reference_seconds", "landmark_seconds", "elapsed_seconds"}


def test_evaluate_returns_every_column_of_the_sweeps_row(sweep, head):
    q, k, v = head
    for row in sweep.itertuples(index=False):
        record = nystrom.evaluate(q, k, v, **options_of(row))
        assert set(record) == set(sweep.columns), f"{row.method}: columns differ"
        for column, ours in record.items():
            if column in NOT_COMPARED:
                continue
            theirs = getattr(row, column)
            if isinstance(ours, float):
                same(ours, theirs, column, row)
            else:
                assert ours == theirs, f"{column}: module {ours!r}, program {theirs!r} ({row.method}, {options_of(row)})"
