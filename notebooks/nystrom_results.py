"""Reading `nystrom` results files (shared FORMATS.md §2) for the notebooks: the /sweep table, the /spectra groups,
where the files are (environment variables) and where figures go. Nothing here recomputes the numerics; it only
selects rows and summarizes them over heads for plotting.

Environment:
  NYSTROM_RESULTS   folder holding sweep.h5 and spectrum.h5 (default: <repository>/results); a relative path is
                    taken from the repository root
  NYSTROM_FIGURES   folder the PNGs are written to (default: $NYSTROM_RESULTS/figures)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

REPOSITORY = Path(__file__).resolve().parent.parent
RESULTS_FORMAT = "nystrom-results"
RESULTS_FORMAT_VERSION = 1
STRING_COLUMNS = ("layer", "kernel", "strategy", "pinv", "method")
INT_COLUMNS = ("batch", "head", "n", "d", "landmarks", "pinv_iters", "seed")
FLOAT_COLUMNS = (
    "kernel_param", "spectral_error", "relative_spectral_error", "frobenius_error", "output_relative_error",
    "output_max_error", "output_mean_abs_error", "sigma1_ext", "sigma_m1_ext", "sigma_m_core", "bound_ratio",
    "theorem1_bound", "theorem2_bound", "theorem3_bound", "theorem3_k", "c_emp", "pinv_residual", "seconds",
)
REQUIRED_COLUMNS = STRING_COLUMNS + INT_COLUMNS + FLOAT_COLUMNS


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


def save_figure(figure, name: str) -> Path:
    """Writes `figure` as <figures>/<name>.png and returns the path."""
    path = figures_dir() / f"{name}.png"
    figure.savefig(path, dpi=110, bbox_inches="tight")
    print(f"wrote {path}")
    return path


def _open_results(path: Path) -> h5py.File:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such results file (set NYSTROM_RESULTS, or run `nystrom` first)")
    file = h5py.File(path, "r")
    kind = file.attrs.get("format")
    kind = kind.decode() if isinstance(kind, bytes) else kind
    version = file.attrs.get("format_version")
    if kind != RESULTS_FORMAT:
        file.close()
        raise ValueError(f"{path}: attribute format is {kind!r}, expected {RESULTS_FORMAT!r}")
    if version is None or int(np.asarray(version).ravel()[0]) != RESULTS_FORMAT_VERSION:
        file.close()
        raise ValueError(f"{path}: unknown format_version {version!r} (this notebook reads {RESULTS_FORMAT_VERSION})")
    return file


def provenance(path: Path) -> dict[str, str]:
    """The root attributes of a results file, as text."""
    with _open_results(path) as file:
        return {k: v.decode() if isinstance(v, bytes) else str(v) for k, v in file.attrs.items()}


class Table(dict):
    """Columns of /sweep as numpy arrays (strings decoded), all of one length, with row selection."""

    @property
    def rows(self) -> int:
        return len(next(iter(self.values()))) if self else 0

    def where(self, mask: np.ndarray | None = None, **equal) -> "Table":
        """Rows where `mask` holds and every column named in `equal` has the given value."""
        keep = np.ones(self.rows, dtype=bool) if mask is None else np.asarray(mask, dtype=bool).copy()
        for column, value in equal.items():
            keep &= self[column] == value
        return Table({name: values[keep] for name, values in self.items()})

    def values_of(self, column: str) -> list:
        """Distinct values of a column in first-seen order."""
        _, first = np.unique(self[column], return_index=True)
        return [self[column][i] for i in sorted(first)]


def read_sweep(path: Path | None = None) -> Table:
    """The /sweep table of a results file; checks the format attributes and the required columns."""
    path = path or results_dir() / "sweep.h5"
    with _open_results(path) as file:
        if "sweep" not in file:
            raise ValueError(f"{path}: no /sweep group")
        group = file["sweep"]
        missing = [c for c in REQUIRED_COLUMNS if c not in group]
        if missing:
            raise ValueError(f"{path}: /sweep lacks required columns {missing}")
        table = Table()
        for name, dataset in group.items():
            if not isinstance(dataset, h5py.Dataset) or dataset.ndim != 1:
                continue
            if h5py.check_string_dtype(dataset.dtype) is not None:
                table[name] = np.asarray(dataset.asstr()[...], dtype=object)
            else:
                table[name] = dataset[...]
        lengths = {name: len(values) for name, values in table.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"{path}: /sweep columns have different lengths {lengths}")
    print(f"{path}: {table.rows} rows, {len(table)} columns")
    return table


@dataclass
class LayerSpectra:
    """One /spectra/<layer> group: singular values [B, H, k] per matrix (G, S, Gext, attn), ranks if written."""

    layer: str
    singular_values: dict[str, np.ndarray]
    ranks: dict[str, np.ndarray]
    attrs: dict[str, object]

    def normalized(self, matrix: str) -> np.ndarray:
        """σ_i/σ₁ per head, [B·H, k] (NaN where the file has NaN padding)."""
        sv = self.singular_values[matrix]
        flat = sv.reshape(-1, sv.shape[-1])
        return flat / flat[:, :1]

    def numerical_rank(self, matrix: str) -> tuple[float, bool]:
        """Mean numerical rank over heads, and whether it is only a lower bound (k values kept, all above tol).
        Uses the file's rank_<matrix> when written; otherwise counts the kept σ_i/σ₁ above the rank_tol attribute."""
        k = self.singular_values[matrix].shape[-1]
        if matrix in self.ranks and (self.ranks[matrix] >= 0).all():
            ranks = self.ranks[matrix].astype(float)
            return float(ranks.mean()), False
        tol = float(self.attrs.get("rank_tol", 1e-6))
        counts = (np.nan_to_num(self.normalized(matrix), nan=0.0) > tol).sum(axis=1)
        return float(counts.mean()), bool((counts == k).any())


def read_spectra(path: Path | None = None) -> list[LayerSpectra]:
    """Every /spectra/<layer> group of a results file, in file order."""
    path = path or results_dir() / "spectrum.h5"
    layers = []
    with _open_results(path) as file:
        if "spectra" not in file:
            raise ValueError(f"{path}: no /spectra group")
        for name, group in file["spectra"].items():
            values = {key[3:]: group[key][...] for key in group if key.startswith("sv_")}
            ranks = {key[5:]: group[key][...] for key in group if key.startswith("rank_")}
            if not values:
                raise ValueError(f"{path}: /spectra/{name} has no sv_* dataset")
            for key, array in values.items():
                if array.ndim != 3:
                    raise ValueError(f"{path}: /spectra/{name}/sv_{key} has shape {array.shape}, expected [B, H, k]")
            attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in group.attrs.items()}
            layers.append(LayerSpectra(name, values, ranks, attrs))
    print(f"{path}: {len(layers)} layers, matrices {sorted(layers[0].singular_values) if layers else []}")
    return layers


def landmark_axis(ax, landmarks) -> None:
    """Log-2 x axis labelled with the landmark counts themselves."""
    ticks = sorted({int(m) for m in landmarks})
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
    """Median of y against each distinct x on a log y axis, the interquartile range shaded; False when empty."""
    xs, median, low, high = median_and_quartiles(x, y)
    if xs.size == 0:
        return False
    line, = ax.semilogy(xs, median, marker="o", label=label)
    ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.15)
    return True
