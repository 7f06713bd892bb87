"""The notebooks' side of reading `nystrom` results files (docs/formats.md §2): where the files are (environment
variables), where figures go, and plotting helpers. The readers themselves are the package's (nystrom.results,
installed by scripts/setup-python.sh); here they get the default paths and print what they read. Nothing here
recomputes the numerics; it only selects rows and summarizes them over heads for plotting.

Environment:
  NYSTROM_RESULTS   folder holding sweep.h5, spectrum.h5, bench.h5 and vision.h5 (default: <repository>/results);
                    a relative path is taken from the repository root
  NYSTROM_FIGURES   folder the PNGs are written to (default: $NYSTROM_RESULTS/figures)
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
from nystrom import results as _results
from nystrom.results import (  # noqa: F401
    REQUIRED_COLUMNS, BenchResults, LayerSpectra, Table, VisionResults, approximation_size, provenance)

REPOSITORY = Path(__file__).resolve().parent.parent


def _from_repository(value: str) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else REPOSITORY / path


def results_dir() -> Path:
    return _from_repository(os.environ.get("NYSTROM_RESULTS", "results"))


def figures_dir() -> Path:
    folder = os.environ.get("NYSTROM_FIGURES")
    path = _from_repository(folder) if folder else results_dir() / "figures"
    path.mkdir(parents=True, exist_ok=True)
    return path


def reference_note(results: Path | str) -> str:
    """What the exact side of a sweep or spectrum file was computed from (its root attribute `reference`,
    docs/formats.md §2; files written before the attribute existed are `kernel`), as a line for a figure."""
    if _results.attributes(results).get("reference", "kernel") == "model":
        return "exact side: the model's scores, exp(s·q·kᵀ + bias + mask) (--reference model)"
    return "exact side: the kernel of each head's q and k alone (--reference kernel)"


def model_scored_layers(results: Path | str | None = None) -> list[str]:
    """The layers of a sweep or spectrum file (default $NYSTROM_RESULTS/sweep.h5) whose exact side is the model's
    attention with its bias or mask (`reference` = model; the layers its `attention_reference` names as applied,
    docs/formats.md §2): Lemma 2.1 bounds the kernel's own approximation, not those rows' errors."""
    attributes = _results.attributes(Path(results) if results else results_dir() / "sweep.h5")
    if attributes.get("reference", "kernel") != "model":
        return []
    listed = re.findall(r" applied \(layers ([^)]*)\)", str(attributes.get("attention_reference", "")))
    return sorted({layer.strip() for names in listed for layer in names.split(",")})


def save_figure(figure, name: str, results: Path | str | None = None) -> Path:
    """Writes `figure` as <figures>/<name>.png and returns the path; with `results` (the sweep or spectrum file the
    figure shows), a footer says what its exact side was computed from (reference_note)."""
    if results is not None:
        figure.text(0.01, 0.0, reference_note(results), fontsize=7, color="0.35", ha="left", va="top")
    path = figures_dir() / f"{name}.png"
    figure.savefig(path, dpi=110, bbox_inches="tight")
    print(f"wrote {path}")
    return path


def read_sweep(path: Path | str | None = None) -> Table:
    """The /sweep table of a results file (default $NYSTROM_RESULTS/sweep.h5); checks the format attributes and the
    required columns."""
    path = Path(path) if path else results_dir() / "sweep.h5"
    table = _results.read_sweep(path)
    print(f"{path}: {table.rows} rows, {len(table)} columns")
    return table


def read_bench(path: Path | str | None = None) -> BenchResults:
    """The tables of a bench results file (default $NYSTROM_RESULTS/bench.h5), older format versions read as version
    3 (nystrom.results.read_bench); checks the format attributes and the columns the bench notebook reads."""
    path = Path(path) if path else results_dir() / "bench.h5"
    bench = _results.read_bench(path)
    optional = [f", /{name}: {table.rows} rows" for name, table in (("bench_gemm", bench.gemm),
                                                                    ("bench_matvec", bench.matvec),
                                                                    ("bench_batch", bench.batch))
                if table is not None]
    print(f"{path}: /bench: {bench.bench.rows} rows, /bench_steps: {bench.steps.rows} rows" + "".join(optional))
    return bench


def read_spectra(path: Path | str | None = None) -> list[LayerSpectra]:
    """Every /spectra/<layer> group of a results file (default $NYSTROM_RESULTS/spectrum.h5), in file order."""
    path = Path(path) if path else results_dir() / "spectrum.h5"
    layers = _results.read_spectra(path)
    print(f"{path}: {len(layers)} layers, matrices {sorted(layers[0].singular_values) if layers else []}")
    return layers


def read_vision(path: Path | str | None = None) -> VisionResults:
    """The /vision and /vision_windows tables of a vision results file (default $NYSTROM_RESULTS/vision.h5,
    written by notebooks/vision_end_to_end.py), version 1 read as version 2 (nystrom.results.read_vision); checks
    the format attributes and the columns the notebook reads."""
    path = Path(path) if path else results_dir() / "vision.h5"
    vision = _results.read_vision(path)
    print(f"{path}: /vision: {vision.vision.rows} rows, /vision_windows: {vision.windows.rows} rows")
    return vision


def log2_axis(ax, values) -> None:
    """Log-2 x axis labelled with the values themselves (landmark counts, token counts N)."""
    ticks = sorted({int(v) for v in values})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [str(m) for m in ticks])
    ax.minorticks_off()


def median_and_quartiles(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For each distinct finite x: the median and the 25th/75th percentiles of the finite y (over heads, layers)."""
    finite = np.isfinite(x) & np.isfinite(y)
    xs = np.unique(x[finite])
    groups = [y[finite & (x == value)] for value in xs]
    return (xs, np.array([np.median(g) for g in groups]), np.array([np.percentile(g, 25) for g in groups]),
            np.array([np.percentile(g, 75) for g in groups]))


def plot_median_band(ax, x: np.ndarray, y: np.ndarray, label: str) -> bool:
    """Median of y against each distinct x on a log y axis, the interquartile range shaded; False when empty. Says
    how many non-finite y (diverged or overflowed points) are left out."""
    left_out = int((np.isfinite(x) & ~np.isfinite(y)).sum())
    if left_out:
        print(f"{label}: {left_out} of {y.size} values are not finite and left out of the medians")
    xs, median, low, high = median_and_quartiles(x, y)
    if xs.size == 0:
        return False
    line, = ax.semilogy(xs, median, marker="o", label=label)
    ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.15)
    return True


def has_columns(table: Table, *columns: str) -> bool:
    """Whether `table` has every named column (files of older format versions lack the newer ones, docs/formats.md
    §2: the optimality and certificate columns since version 4, `precision` since version 2)."""
    return all(column in table for column in columns)


# The setting of `nystrom sweep` without options, per /sweep column (docs/formats.md §2.1): the rows a figure shows
# when it must not pool settings (a median over two stabilizations or precisions mixes two approximations).
DEFAULT_SETTING = {"precision": "double", "stabilization": "row-max", "oversampling": 1.0, "pinv_tolerance": 0.0,
                   "different_indices": 0}


def one_setting(table: Table, preferred: dict | None = None) -> Table:
    """The rows of one value of each column of `preferred` (default DEFAULT_SETTING) that the table has: the preferred
    value where some row has it, else the first row's; prints the choice where a column held several."""
    chosen = []
    for column, value in (DEFAULT_SETTING if preferred is None else preferred).items():
        if column not in table or table.rows == 0:
            continue
        present = table.values_of(column)
        pick = value if value in present else present[0]
        if len(present) > 1:
            chosen.append(f"{column} {pick} (of {', '.join(map(str, present))})")
        table = table.where(**{column: pick})
    if chosen:
        print("shown: " + "; ".join(chosen))
    return table


def plot_median(ax, x: np.ndarray, y: np.ndarray, label: str, **style) -> bool:
    """The median of the finite y against each distinct x as one line on a log y axis (values ≤ 0 left off)."""
    xs, median, _, _ = median_and_quartiles(x, y)
    keep = median > 0
    if not keep.any():
        return False
    ax.semilogy(xs[keep], median[keep], label=label, **style)
    return True


def plot_floor(ax, x: np.ndarray, floor: np.ndarray, label: str = "floor σₘ₊₁ (Eckart–Young)") -> bool:
    """The median over heads of a rank-r floor σ_{r+1}/‖M‖₂ (the least error of any matrix of rank r, Eckart–Young–
    Mirsky; docs/mathematics.md §9.1) against x as one dashed black line; 0 (r ≥ N) is left off the log axis."""
    return plot_median(ax, x, floor, label, color="k", ls="--", lw=1.2)


def grouped_boxplot(ax, labels: list[str], series: dict[str, list[np.ndarray]], hatches: dict | None = None,
                    log: bool = True) -> dict:
    """Box plots of several series side by side at each label of a categorical x axis: `series` maps a legend name
    to one array of values per label (the finite ones are drawn; with `log`, the positive ones on a log y axis).
    Returns each series' box positions (an array per name), for marks beside the boxes."""
    width = 0.8 / max(len(series), 1)
    positions = {}
    for index, (name, groups) in enumerate(series.items()):
        x = np.arange(len(labels)) - 0.4 + width * (index + 0.5)
        values = [np.asarray(g, dtype=float) for g in groups]
        values = [g[np.isfinite(g) & ((g > 0) | (not log))] for g in values]
        drawn = [i for i, g in enumerate(values) if g.size]
        style = {"facecolor": f"C{index}", "alpha": 0.75, "hatch": (hatches or {}).get(name)}
        if drawn:
            ax.boxplot([values[i] for i in drawn], positions=x[drawn], widths=0.85 * width, patch_artist=True,
                       manage_ticks=False, boxprops=style, medianprops={"color": "k"},
                       flierprops={"markersize": 2, "alpha": 0.5})
        ax.bar(0, 0, width=0, label=name, color=f"C{index}", alpha=0.75, hatch=style["hatch"])  # legend entry
        positions[name] = x
    ax.set_xticks(range(len(labels)), labels)
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.grid(False, axis="x")  # a tick's grid line would cut its middle box
    if log:
        ax.set_yscale("log")
    return positions


def panel_grid(count: int, columns: int = 4, size: tuple[float, float] = (3.6, 3.2), **options):
    """A figure of `count` panels wrapped into rows of at most `columns`; returns it and the panels (the unused
    ones hidden)."""
    import matplotlib.pyplot as plt

    ncols = max(1, min(columns, count))
    nrows = max(1, -(-count // ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(size[0] * ncols, size[1] * nrows), squeeze=False, **options)
    for ax in axes.flat[count:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:count])


def setting_names(table: Table) -> np.ndarray:
    """Per row, the approximation's setting as a short name: the method, then its pseudoinverse (with iterations),
    stabilization and oversampling where they are not `none` / 1 (landmark strategies and sizes not included)."""
    stabilization = table["stabilization"] if "stabilization" in table else np.full(table.rows, "none", dtype=object)
    oversampling = table["oversampling"] if "oversampling" in table else np.ones(table.rows)
    names = []
    for method, pinv, iterations, stabilized, over in zip(table["method"], table["pinv"], table["pinv_iters"],
                                                          stabilization, oversampling):
        parts = [method]
        if pinv != "none":
            parts.append(f"{pinv}×{iterations}" if iterations else pinv)
        if stabilized != "none":
            parts.append(stabilized)
        if over != 1:
            parts.append(f"p = {over:g}m")
        names.append(" ".join(parts))
    return np.array(names, dtype=object)


def nonfinite_output(table: Table) -> np.ndarray:
    """Per row, whether the approximate output Ô had a non-finite entry (`nonfinite_output_rows` > 0; in files
    without the column, a non-finite `output_relative_error` where the dump had values)."""
    if "nonfinite_output_rows" in table:
        return table["nonfinite_output_rows"] > 0
    has_values = table["dv"] > 0 if "dv" in table else np.ones(table.rows, dtype=bool)
    return has_values & ~np.isfinite(table["output_relative_error"])


# Lemma 2.1's Ĝ = G_L G_A⁺ G_U (PnP-Nystra; docs/mathematics.md §3), per /sweep column: the exact pseudoinverse at
# its default cut of a square core, the kernel's own blocks (the row scalings of row-max and row-sum cancel in a
# square core's inverse; clamped changes the kernel), native arithmetic (half and bfloat16 round the blocks).
LEMMA_SETTING = {"method": ["pnp-nystra"], "pinv": ["exact"], "stabilization": ["none", "row-max", "row-sum"],
                 "precision": ["float", "double"], "oversampling": [1.0], "pinv_tolerance": [0.0]}


def lemma_rows(table: Table) -> Table:
    """The rows whose Ĝ is the one Lemma 2.1 bounds (LEMMA_SETTING; columns an older file lacks are its defaults)."""
    keep = np.ones(table.rows, dtype=bool)
    for column, values in LEMMA_SETTING.items():
        if column in table:
            keep &= np.isin(table[column], values)
    return table.where(keep)


def mark_counts(ax, x: np.ndarray, counts: list[int], label: str, color: str = "red") -> None:
    """Above each x with a nonzero count, a triangle at the top of the axes and the count (rows a box leaves out,
    such as those whose output is not finite); one legend entry `label` where any is marked."""
    transform = ax.get_xaxis_transform()  # x in data, y in axes fractions
    for position, count in zip(x, counts):
        if count:
            ax.plot(position, 0.97, marker="v", color=color, transform=transform, clip_on=False)
            ax.text(position, 1.0, str(count), color=color, fontsize=7, ha="center", va="bottom",
                    transform=transform)
    if any(counts):
        ax.plot([], [], marker="v", color=color, ls="none", label=label)


def figure_legend(fig, axes, **options) -> None:
    """One legend for the whole figure, right of the panels: every labelled line of `axes`, each label once."""
    entries = {}
    for ax in np.ravel(axes):
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    if entries:
        fig.legend(list(entries.values()), list(entries), loc="center left", bbox_to_anchor=(1.0, 0.5),
                   fontsize=8, **options)
