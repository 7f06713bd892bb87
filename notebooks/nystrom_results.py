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
