#!/usr/bin/env python3
"""Generates the figure notebooks (*.ipynb, without outputs) from the cell sources below, so that they can be
reviewed and diffed as Python. Run after editing:  .venv/bin/python notebooks/make_notebooks.py
(tests/python/test_notebooks.py fails when a committed notebook differs from what this writes).

The notebooks read only HDF5 written by `nystrom` (FORMATS.md §2) through nystrom_results.py, never recompute the
numerics, and write PNGs to $NYSTROM_FIGURES (default results/figures/). Execute headless with
scripts/make-figures.sh or `jupyter nbconvert --to notebook --execute`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent

SETUP = """\
%matplotlib inline
import numpy as np
import matplotlib.pyplot as plt
import nystrom_results as nr

plt.rcParams.update({"figure.dpi": 90, "axes.grid": True, "grid.alpha": 0.3})
print("results:", nr.results_dir(), "| figures:", nr.figures_dir())"""

SPECTRUM = [
    ("md", """\
# Singular-value decay of real attention and kernel matrices

Reads `$NYSTROM_RESULTS/spectrum.h5`, written by `nystrom spectrum` (FORMATS.md §2: `/spectra/<layer>/sv_<X>` as
`[B, H, k]`, σ₁ first). For every layer it shows the top singular values normalized by σ₁ and averaged over heads
(PnP-Nystra Fig. 1 style), for each matrix the file holds:

| name | matrix (MATH.md) |
|---|---|
| `G` | kernel matrix `κ(Q, K)` (N×N) |
| `S` | attention map `D⁻¹G` |
| `Gext` | extended matrix `G̃ = κ([Q̄;Q],[K̄;K])` of the Nyström bound (MATH §3) |
| `attn` | the probabilities the model really used (masks, position biases), when the dump had them |

Fast decay means a low numerical rank and so a good low-rank (Nyström) approximation with few landmarks."""),
    ("code", SETUP),
    ("code", """\
spectra = nr.read_spectra()
matrices = [m for m in ("G", "S", "Gext", "attn") if any(m in layer.singular_values for layer in spectra)]
for key, value in nr.provenance(nr.results_dir() / "spectrum.h5").items():
    print(f"{key:>16}: {value}")
print("matrices:", matrices, "| layers:", [layer.layer for layer in spectra])"""),
    ("md", "## Normalized decay σᵢ/σ₁, averaged over heads, one line per layer"),
    ("code", """\
colors = plt.cm.viridis(np.linspace(0, 0.9, len(spectra)))
fig, axes = plt.subplots(1, len(matrices), figsize=(4.2 * len(matrices), 3.6), sharey=True, squeeze=False)
for ax, matrix in zip(axes[0], matrices):
    for color, layer in zip(colors, spectra):
        if matrix not in layer.singular_values:
            continue
        decay = np.nanmean(layer.normalized(matrix), axis=0)
        rank, lower_bound = layer.numerical_rank(matrix)
        label = f"{layer.layer} (rank {'≥' if lower_bound else ''}{rank:.0f})"
        ax.semilogy(np.arange(1, decay.size + 1), decay, color=color, label=label)
    ax.set_title(matrix)
    ax.set_xlabel("index i")
    ax.legend(fontsize=7, title="layer (mean numerical rank)", title_fontsize=7)
axes[0][0].set_ylabel("σᵢ / σ₁ (mean over heads)")
fig.suptitle("Singular-value decay per layer")
fig.tight_layout()
nr.save_figure(fig, "spectrum_decay")"""),
    ("md", """\
## Averaged over layers and heads, with the spread over heads

The band is the 10th–90th percentile over all heads of all layers; the numerical rank is the mean over heads of the
count of σᵢ > tol·σ₁ (tol: the file's `rank_tol`), "≥" when the top k kept values are all above it."""),
    ("code", """\
fig, ax = plt.subplots(figsize=(6, 4))
for matrix in matrices:
    curves = np.vstack([layer.normalized(matrix) for layer in spectra if matrix in layer.singular_values])
    index = np.arange(1, curves.shape[1] + 1)
    line, = ax.semilogy(index, np.nanmean(curves, axis=0), label=matrix)
    ax.fill_between(index, np.nanpercentile(curves, 10, axis=0), np.nanpercentile(curves, 90, axis=0),
                    color=line.get_color(), alpha=0.15)
ax.set_xlabel("index i")
ax.set_ylabel("σᵢ / σ₁")
ax.set_title("Mean over layers and heads (band: 10–90% of heads)")
ax.legend()
nr.save_figure(fig, "spectrum_decay_mean")

print(f"{'layer':>8} " + " ".join(f"{m:>10}" for m in matrices))
for layer in spectra:
    cells = []
    for matrix in matrices:
        if matrix in layer.singular_values:
            rank, lower_bound = layer.numerical_rank(matrix)
            cells.append(f"{'≥' if lower_bound else ''}{rank:.1f}")
        else:
            cells.append("-")
    print(f"{layer.layer:>8} " + " ".join(f"{c:>10}" for c in cells))"""),
]

ERRORS = [
    ("md", """\
# Error against landmarks and pseudoinverse iterations

Reads the `/sweep` table of `$NYSTROM_RESULTS/sweep.h5` (written by `nystrom sweep`, FORMATS.md §2) and shows, for
the generalized Nyström approximation (`method = pnp-nystra`), how the errors fall with the number of landmarks m for
each landmark strategy and kernel, and how an iterative pseudoinverse of the m×m core compares with the exact one
(PnP-Nystra Table 6 style). Lines are medians over layers, batches and heads; bands the 25–75% range."""),
    ("code", SETUP),
    ("code", """\
sweep = nr.read_sweep()
for key, value in nr.provenance(nr.results_dir() / "sweep.h5").items():
    print(f"{key:>16}: {value}")
nystra = sweep.where(method="pnp-nystra")
if nystra.rows == 0:
    raise ValueError("no pnp-nystra rows in this sweep: nothing to plot here")
kernels = nystra.values_of("kernel")
strategies = nystra.values_of("strategy")
print("kernels:", kernels, "| strategies:", strategies, "| pinv:", nystra.values_of("pinv"),
      "| landmarks:", sorted(set(nystra["landmarks"].tolist())))"""),
    ("md", "## Error against landmarks (exact pseudoinverse)"),
    ("code", """\
exact = nystra.where(pinv="exact")
metrics = [("relative_spectral_error", "‖G − Ĝ‖₂ / ‖G‖₂"), ("output_relative_error", "‖O − Ô‖_F / ‖O‖_F")]
fig, axes = plt.subplots(len(metrics), len(kernels), figsize=(4.5 * len(kernels), 3.4 * len(metrics)),
                         squeeze=False, sharex=True)
for column, kernel in enumerate(kernels):
    for row, (metric, label) in enumerate(metrics):
        ax = axes[row][column]
        for strategy in strategies:
            rows = exact.where(kernel=kernel, strategy=strategy)
            nr.plot_median_band(ax, rows["landmarks"].astype(float), rows[metric], strategy)
        nr.landmark_axis(ax, exact["landmarks"])
        ax.set_title(f"{kernel}: {metric}", fontsize=9)
        ax.set_ylabel(label)
        if row == len(metrics) - 1:
            ax.set_xlabel("landmarks m")
        if ax.has_data():
            ax.legend(fontsize=7)
fig.tight_layout()
nr.save_figure(fig, "error_vs_landmarks")"""),
    ("md", """\
## Error against pseudoinverse iterations

Solid lines: iterative pseudoinverses (Razavi, Newton–Schulz) against their iteration count; dashed: the exact
pseudoinverse at the same m. One panel per kernel and strategy; colour = landmark count."""),
    ("code", """\
iterative = [p for p in nystra.values_of("pinv") if p != "exact"]
landmarks = sorted(set(nystra["landmarks"].tolist()))
colors = dict(zip(landmarks, plt.cm.plasma(np.linspace(0, 0.85, len(landmarks)))))
styles = dict(zip(iterative, ["-", "-.", ":", (0, (5, 1))]))
fig, axes = plt.subplots(len(kernels), len(strategies), figsize=(3.8 * len(strategies), 3.2 * len(kernels)),
                         squeeze=False, sharey="row")
for row, kernel in enumerate(kernels):
    for column, strategy in enumerate(strategies):
        ax = axes[row][column]
        rows = nystra.where(kernel=kernel, strategy=strategy)
        for m in landmarks:
            base = rows.where(landmarks=m, pinv="exact")
            if base.rows:
                ax.axhline(np.nanmedian(base["relative_spectral_error"]), color=colors[m], ls="--", lw=1)
            for pinv in iterative:
                its, median, _, _ = nr.median_and_quartiles(
                    rows.where(landmarks=m, pinv=pinv)["pinv_iters"].astype(float),
                    rows.where(landmarks=m, pinv=pinv)["relative_spectral_error"])
                if its.size:
                    ax.semilogy(its, median, marker="o", ms=3, color=colors[m], ls=styles[pinv],
                                label=f"{pinv}, m={m}")
        ax.set_title(f"{kernel} / {strategy}", fontsize=9)
        ax.set_xlabel("pinv iterations")
        if column == 0:
            ax.set_ylabel("‖G − Ĝ‖₂ / ‖G‖₂ (median)")
handles, labels = axes[0][0].get_legend_handles_labels()
handles.append(plt.Line2D([], [], color="gray", ls="--", lw=1))
labels.append("exact pinv, same m")
if handles:
    fig.legend(handles, labels, loc="upper center", ncol=min(len(labels), 6), fontsize=7, bbox_to_anchor=(0.5, 1.08))
fig.tight_layout()
nr.save_figure(fig, "error_vs_pinv_iterations")"""),
    ("md", "## Table: median relative spectral error (rows: kernel, strategy, m; columns: pseudoinverse)"),
    ("code", """\
variants = sorted({(p, int(i)) for p, i in zip(nystra["pinv"], nystra["pinv_iters"])}, key=lambda v: (v[0] != "exact", v))
names = [p if p == "exact" else f"{p}×{i}" for p, i in variants]
print(f"{'kernel':>12} {'strategy':>14} {'m':>4} " + " ".join(f"{n:>16}" for n in names))
for kernel in kernels:
    for strategy in strategies:
        for m in landmarks:
            rows = nystra.where(kernel=kernel, strategy=strategy, landmarks=m)
            if rows.rows == 0:
                continue
            cells = []
            for pinv, iters in variants:
                values = rows.where(pinv=pinv, pinv_iters=iters)["relative_spectral_error"]
                values = values[np.isfinite(values)]
                cells.append(f"{np.median(values):16.3e}" if values.size else f"{'-':>16}")
            print(f"{kernel:>12} {strategy:>14} {m:>4} " + " ".join(cells))"""),
]

BOUNDS = [
    ("md", """\
# Validating the error bounds (MATH.md §3)

For the generalized Nyström approximation with the exact pseudoinverse (`method = pnp-nystra`, `pinv = exact`) the
sweep records the empirical `spectral_error = ‖G − Ĝ‖₂` and three derived bounds:

| column | bound | applies when |
|---|---|---|
| `theorem1_bound` | σ₁²/(a − σ_{m+1}) · σ_{m+1}/a | a = σ_m(G_A) > σ_{m+1}(G̃) |
| `theorem2_bound` | 2σ₁² σ_{m+1}/a² | always (G_A nonsingular) |
| `theorem3_bound` | K σ_{m+1} (a posteriori) | K σ_{m+1} < a |

NaN means the bound does not apply to that point. `bound_ratio = σ_{m+1}/a` is the paper's quantity (a term, not a
bound). The figures show where each bound applies, whether it holds (bound ≥ error) and how tight it is (bound/error)."""),
    ("code", SETUP),
    ("code", """\
sweep = nr.read_sweep()
points = sweep.where(method="pnp-nystra", pinv="exact")
points = points.where(np.isfinite(points["spectral_error"]))
if points.rows == 0:
    raise ValueError("no pnp-nystra rows with the exact pseudoinverse: the bounds concern those")
theorems = [("theorem1_bound", "theorem 1"), ("theorem2_bound", "theorem 2"), ("theorem3_bound", "theorem 3")]
kernels = points.values_of("kernel")
error = points["spectral_error"]
print(f"{points.rows} points (pnp-nystra, exact pinv); kernels {kernels}")
print(f"{'bound':>10} {'applies':>9} {'holds':>7} {'violated':>9} {'median bound/error':>20}")
for column, name in theorems:
    bound = points[column]
    applies = np.isfinite(bound)
    holds = applies & (bound >= error * (1 - 1e-9))
    tight = bound[applies] / np.maximum(error[applies], np.finfo(float).tiny)
    print(f"{name:>10} {applies.sum():>9} {holds.sum():>7} {(applies & ~holds).sum():>9} "
          f"{np.median(tight) if tight.size else float('nan'):>20.3g}")"""),
    ("md", "## Bound against empirical error (points above the diagonal: the bound holds)"),
    ("code", """\
markers = {"theorem1_bound": "o", "theorem2_bound": "s", "theorem3_bound": "^"}
fig, axes = plt.subplots(1, len(kernels), figsize=(4.8 * len(kernels), 4.2), squeeze=False)
for ax, kernel in zip(axes[0], kernels):
    rows = points.where(kernel=kernel)
    positive = rows["spectral_error"] > 0
    for column, name in theorems:
        bound = rows[column]
        keep = positive & np.isfinite(bound) & (bound > 0)
        ax.scatter(rows["spectral_error"][keep], bound[keep], s=10, alpha=0.6, marker=markers[column],
                   label=f"{name} ({keep.sum()}/{rows.rows} apply)")
    if ax.collections:
        ax.set_xscale("log")
        ax.set_yscale("log")
        low, high = ax.get_xlim()[0], max(ax.get_xlim()[1], ax.get_ylim()[1])
        ax.plot([low, high], [low, high], color="k", lw=1, label="bound = error")
    ax.set_title(kernel)
    ax.set_xlabel("empirical ‖G − Ĝ‖₂")
    ax.set_ylabel("bound")
    ax.legend(fontsize=7)
fig.tight_layout()
nr.save_figure(fig, "bounds_vs_error")"""),
    ("md", "## Where each bound applies: fraction of points with a finite bound, against landmarks"),
    ("code", """\
fig, axes = plt.subplots(1, len(kernels), figsize=(4.5 * len(kernels), 3.4), squeeze=False, sharey=True)
for ax, kernel in zip(axes[0], kernels):
    rows = points.where(kernel=kernel)
    landmarks = np.unique(rows["landmarks"])
    for column, name in theorems:
        fraction = [np.isfinite(rows.where(landmarks=m)[column]).mean() for m in landmarks]
        ax.plot(landmarks, fraction, marker=markers[column], label=name)
    nr.landmark_axis(ax, landmarks)
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(kernel)
    ax.set_xlabel("landmarks m")
    ax.set_ylabel("fraction of heads where it applies")
    ax.legend(fontsize=7)
fig.tight_layout()
nr.save_figure(fig, "bounds_applicability")"""),
    ("md", """\
## Tightness: bound / error (1 = tight; below 1 would be a violation), and the paper's ratio σₘ₊₁(G̃)/σₘ(G_A)"""),
    ("code", """\
fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
ratios, labels = [], []
for kernel in kernels:
    rows = points.where(kernel=kernel)
    for column, name in theorems:
        bound = rows[column]
        keep = np.isfinite(bound) & (rows["spectral_error"] > 0)
        if keep.any():
            ratios.append(bound[keep] / rows["spectral_error"][keep])
            labels.append(f"{kernel}\\n{name}")
if ratios:
    axes[0].boxplot(ratios, showfliers=True)
    axes[0].set_xticks(range(1, len(labels) + 1), labels, fontsize=7)
    axes[0].set_yscale("log")
axes[0].axhline(1, color="k", lw=1)
axes[0].set_ylabel("bound / empirical error")
axes[0].set_title("tightness where the bound applies")
for kernel in kernels:
    rows = points.where(kernel=kernel)
    keep = np.isfinite(rows["bound_ratio"]) & (rows["bound_ratio"] > 0) & (rows["spectral_error"] > 0)
    axes[1].scatter(rows["bound_ratio"][keep], rows["spectral_error"][keep], s=10, alpha=0.6, label=kernel)
if axes[1].collections:
    axes[1].set_xscale("log")
    axes[1].set_yscale("log")
    axes[1].legend(fontsize=7)
axes[1].set_xlabel("σₘ₊₁(G̃) / σₘ(G_A)  (bound_ratio)")
axes[1].set_ylabel("empirical ‖G − Ĝ‖₂")
axes[1].set_title("the paper's quantity against the error")
fig.tight_layout()
nr.save_figure(fig, "bounds_tightness")"""),
]

METHODS = [
    ("md", """\
# Method comparison

Compares the approximation methods in the `/sweep` table (`method` column: pnp-nystra, nystromformer, cur,
symmetric-nystrom, performer, linformer, exact) on the errors every method has: the attention output errors against
exact attention, and, where a method has a kernel approximation Ĝ, the spectral error. For PnP-Nystra the exact
pseudoinverse is shown. With only one method in the file the figures show that one and say so; run
`nystrom sweep --method pnp-nystra,nystromformer,...` to fill them in."""),
    ("code", SETUP),
    ("code", """\
sweep = nr.read_sweep()
rows = sweep.where((sweep["method"] != "pnp-nystra") | (sweep["pinv"] == "exact"))
methods = rows.values_of("method")
kernels = rows.values_of("kernel")
print("methods:", methods, "| kernels:", kernels)
if len(methods) < 2:
    print(f"only {methods} in this sweep: the comparison below shows it alone")"""),
    ("code", """\
metrics = [("output_relative_error", "‖O − Ô‖_F / ‖O‖_F"), ("output_mean_abs_error", "mean |O − Ô|"),
           ("relative_spectral_error", "‖G − Ĝ‖₂ / ‖G‖₂")]
fig, axes = plt.subplots(len(kernels), len(metrics), figsize=(4.4 * len(metrics), 3.4 * len(kernels)), squeeze=False)
for row, kernel in enumerate(kernels):
    for column, (metric, label) in enumerate(metrics):
        ax = axes[row][column]
        for method in methods:
            selected = rows.where(kernel=kernel, method=method)
            nr.plot_median_band(ax, selected["landmarks"].astype(float), selected[metric], method)
        nr.landmark_axis(ax, rows["landmarks"])
        ax.set_title(f"{kernel}: {metric}", fontsize=9)
        ax.set_xlabel("landmarks / features m")
        ax.set_ylabel(label)
        if ax.has_data():
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "no finite values", ha="center", va="center", transform=ax.transAxes)
fig.suptitle("Methods (median over layers and heads; band 25–75%)")
fig.tight_layout()
nr.save_figure(fig, "methods_comparison")"""),
    ("code", """\
print(f"{'kernel':>12} {'method':>18} {'points':>7} {'output rel. err. (median)':>26} {'seconds (median)':>18}")
for kernel in kernels:
    for method in methods:
        selected = rows.where(kernel=kernel, method=method)
        if selected.rows:
            error = selected["output_relative_error"]
            error = error[np.isfinite(error)]
            print(f"{kernel:>12} {method:>18} {selected.rows:>7} "
                  f"{np.median(error) if error.size else float('nan'):>26.3e} {np.median(selected['seconds']):>18.3e}")"""),
]

NOTEBOOKS = {
    "spectrum_decay.ipynb": SPECTRUM,
    "error_vs_landmarks.ipynb": ERRORS,
    "bound_validation.ipynb": BOUNDS,
    "method_comparison.ipynb": METHODS,
}


def build(cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
    notebook = nbformat.v4.new_notebook()
    notebook.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    for index, (kind, source) in enumerate(cells):
        cell = nbformat.v4.new_markdown_cell(source) if kind == "md" else nbformat.v4.new_code_cell(source)
        cell["id"] = f"cell-{index:02d}"
        notebook.cells.append(cell)
    nbformat.validate(notebook)
    return notebook


def render(name: str) -> str:
    return nbformat.writes(build(NOTEBOOKS[name])) + "\n"


def main() -> int:
    for name in NOTEBOOKS:
        (HERE / name).write_text(render(name), encoding="utf-8")
        print(f"wrote {HERE / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
