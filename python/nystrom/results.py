"""Reading `nystrom` results files (docs/formats.md §2): the /sweep table, the /bench tables, the /spectra
groups and the /vision tables of notebooks/vision_end_to_end.py, each checked against the format attributes and the
required columns. The notebooks (notebooks/nystrom_results.py) read through these functions too, so there is one
reader.

    df = nystrom.read_results("results/sweep.h5")     # /sweep as a pandas DataFrame, root attributes in df.attrs
    table = nystrom.results.read_sweep(path)         # the same columns as numpy arrays (a Table)
    bench = nystrom.results.read_bench("results/bench.h5")      # bench.bench, .steps, .gemm, .matvec, .batch
    vision = nystrom.results.read_vision("results/vision.h5")   # vision.vision, vision.windows
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import h5py
import numpy as np

if TYPE_CHECKING:
    import pandas

RESULTS_FORMAT = "nystrom-results"
# Version 2: /sweep's `landmarks` holds m only (0 for methods without landmarks); performer's feature count r is in
# `features`, linformer's projected length k in `projected`. Version 3: /bench likewise, and the /bench tables' `dtype`
# (float32, float64) is `precision` (float, double). Version 4 (one vocabulary, CHANGELOG.md): the root attribute
# `matrix_free_forced` is `matrix_free`; the methods' switches are /sweep columns (different_indices, copy_rows,
# share_projections, front_padding) instead of the root attribute `method_switches`; new columns of optimality and
# certificates. Older files are read as version 4.
RESULTS_FORMAT_VERSIONS = (1, 2, 3, 4)
# The /sweep switch columns of version 4, and their spellings in an older file's `method_switches` attribute.
SWITCH_COLUMNS = {"different_indices": "different-indices", "copy_rows": "copy-rows",
                  "share_projections": "share-projections", "front_padding": "front-padding"}
STRING_COLUMNS = ("layer", "kernel", "strategy", "pinv", "method")
INT_COLUMNS = ("batch", "head", "n", "d", "landmarks", "pinv_iters", "seed")
FLOAT_COLUMNS = (
    "kernel_param", "spectral_error", "relative_spectral_error", "frobenius_error", "output_relative_error",
    "output_max_error", "output_mean_abs_error", "sigma1_ext", "sigma_m1_ext", "sigma_m_core", "bound_ratio",
    "theorem1_bound", "theorem2_bound", "theorem3_bound", "theorem3_k", "c_emp", "pinv_residual", "seconds",
)
REQUIRED_COLUMNS = STRING_COLUMNS + INT_COLUMNS + FLOAT_COLUMNS
# `nystrom bench` (experiments/bench.cpp): the columns the bench notebook reads; gemm_fraction, /bench_gemm and
# /bench_matvec are optional (GEMM reference rates, written by newer versions).
BENCH_COLUMNS = ("method", "n", "d", "precision", "threads", "landmarks", "seconds", "flops", "gflops",
                 "speedup_vs_exact", "output_relative_error", "blas_core")
BENCH_STEP_COLUMNS = ("step", "step_index", "n", "d", "precision", "threads", "landmarks", "seconds", "fraction",
                      "blas_core")
BENCH_GEMM_COLUMNS = ("device", "precision", "threads", "n", "seconds", "gflops", "blas_core")
BENCH_MATVEC_COLUMNS = ("device", "precision", "threads", "n", "d", "seconds", "gflops", "gemm_fraction",
                        "blas_core")
BENCH_BATCH_COLUMNS = ("device", "precision", "threads", "batch", "heads", "n", "d", "method", "landmarks",
                       "features", "projected", "best_seconds", "median_seconds", "copy_seconds", "speedup_vs_exact",
                       "heads_per_second", "output_relative_error", "blas_core")
# The /bench tables' precision column before version 3: `dtype`, with these values.
PRECISION_OF_DTYPE = {"float32": "float", "float64": "double"}


def open_results(path: Path | str) -> h5py.File:
    """Opens a results file for reading; raises FileNotFoundError when it is missing and ValueError when it is not
    an HDF5 file it can read or its `format` attribute is not nystrom-results at a known format_version."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"{path}: is a directory, not a results file")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such results file (written by `nystrom sweep`, `spectrum` or `bench`)")
    try:
        file = h5py.File(path, "r")
    except OSError as error:
        raise ValueError(f"{path}: not a readable HDF5 file ({error})") from error
    kind = file.attrs.get("format")
    kind = kind.decode() if isinstance(kind, bytes) else kind
    version = file.attrs.get("format_version")
    if kind != RESULTS_FORMAT:
        file.close()
        raise ValueError(f"{path}: attribute format is {kind!r}, expected {RESULTS_FORMAT!r}")
    if _integer(version) not in RESULTS_FORMAT_VERSIONS:
        file.close()
        raise ValueError(f"{path}: unknown format_version {version!r} (this reader reads {RESULTS_FORMAT_VERSIONS})")
    return file


def _integer(value) -> int | None:
    """A one-element integral attribute (format_version: 3, [3] or 3.0) as an int; None for anything else (a
    missing attribute, text, NaN, 2.7, an empty array)."""
    array = np.asarray(value)
    if value is None or array.size != 1 or array.dtype.kind not in "iuf":
        return None
    number = array.ravel()[0]
    return int(number) if np.isfinite(number) and number == np.round(number) else None


def _attribute_value(value):
    """An HDF5 attribute as a Python value: text decoded, one-element arrays as scalars."""
    if isinstance(value, bytes):
        return value.decode()
    array = np.asarray(value)
    if array.dtype.kind in "SO" and array.size == 1:
        item = array.ravel()[0]
        return item.decode() if isinstance(item, bytes) else item
    return array.ravel()[0].item() if array.size == 1 else array.tolist()


def attributes(path: Path | str) -> dict[str, object]:
    """The root attributes of a results file (format, program_version, git_revision, command_line, created,
    threads, input, ...) as Python values, as format version 4 names them (`matrix_free_forced` of an older file
    read as `matrix_free`)."""
    with open_results(path) as file:
        values = {key: _attribute_value(value) for key, value in file.attrs.items()}
    if "matrix_free_forced" in values:
        values["matrix_free"] = values.pop("matrix_free_forced")
    return values


def provenance(path: Path | str) -> dict[str, str]:
    """The root attributes of a results file, as text."""
    with open_results(path) as file:
        return {k: v.decode() if isinstance(v, bytes) else str(v) for k, v in file.attrs.items()}


class Table(dict):
    """Columns of a results table (/sweep, /bench, ...) as numpy arrays (strings decoded), all of one length, with
    row selection."""

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

    def group_by(self, *columns: str) -> list[tuple[tuple, "Table"]]:
        """(values, rows) for each distinct combination of the named columns, in first-seen order; columns the
        table lacks are left out of the grouping (and out of the values)."""
        present = [c for c in columns if c in self]
        if not present:
            return [((), self)] if self.rows else []
        keys = list(zip(*(self[c].tolist() for c in present)))
        distinct = list(dict.fromkeys(keys))
        return [(key, self.where(np.array([k == key for k in keys], dtype=bool))) for key in distinct]


def _group(file: h5py.File, path: Path | str, name: str) -> h5py.Group:
    """The group /`name` of an open results file; raises ValueError naming it when it is missing or not a group."""
    if name not in file:
        raise ValueError(f"{path}: no /{name} group")
    if not isinstance(file[name], h5py.Group):
        raise ValueError(f"{path}: /{name} is a {type(file[name]).__name__}, expected a group")
    return file[name]


def read_table(file: h5py.File, path: Path | str, name: str, required: tuple[str, ...]) -> Table:
    """The 1-D column datasets of group `name` of an open results file as a Table; checks the required columns
    and equal lengths."""
    group = _group(file, path, name)
    missing = [c for c in required if c not in group]
    if missing:
        raise ValueError(f"{path}: /{name} lacks required columns {missing}")
    malformed = [c for c in required if not isinstance(group[c], h5py.Dataset) or group[c].ndim != 1]
    if malformed:
        raise ValueError(f"{path}: /{name} columns {malformed} are not 1-D datasets")
    table = Table()
    for column, dataset in group.items():
        if not isinstance(dataset, h5py.Dataset) or dataset.ndim != 1:
            continue
        if h5py.check_string_dtype(dataset.dtype) is not None:
            table[column] = np.asarray(dataset.asstr()[...], dtype=object)
        else:
            table[column] = dataset[...]
    lengths = {column: len(values) for column, values in table.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"{path}: /{name} columns have different lengths {lengths}")
    return table


def format_version(file: h5py.File) -> int:
    """The format_version of an open results file (open_results checked it)."""
    return _integer(file.attrs["format_version"])


def _sizes_in_their_columns(table: Table) -> None:
    """Reads a version 1 /sweep or a version 1 or 2 /bench as version 3: performer's r and linformer's k move from
    `landmarks` to `features` and `projected` (0 elsewhere), leaving `landmarks` = m."""
    for method, column in (("performer", "features"), ("linformer", "projected")):
        rows = table["method"] == method
        table[column] = np.where(rows, table["landmarks"], 0).astype(np.int64)
        table["landmarks"] = np.where(rows, 0, table["landmarks"]).astype(np.int64)


def _switches_in_their_columns(file: h5py.File, table: Table) -> None:
    """Reads a /sweep before version 4 as version 4: the run's switches (root attribute `method_switches`,
    space-separated; none where it is missing) become the columns of SWITCH_COLUMNS, the same on every row."""
    given = file.attrs.get("method_switches", "")
    given = (given.decode() if isinstance(given, bytes) else str(given)).split()
    rows = len(table["method"])
    for column, switch in SWITCH_COLUMNS.items():
        table[column] = np.full(rows, int(switch in given), dtype=np.int64)


def read_sweep(path: Path | str) -> Table:
    """The /sweep table of a results file (as format version 4); checks the format attributes and the required
    columns."""
    with open_results(path) as file:
        table = read_table(file, path, "sweep", REQUIRED_COLUMNS)
        if format_version(file) == 1:
            _sizes_in_their_columns(table)
        if format_version(file) < 4:
            _switches_in_their_columns(file, table)
        return table


def approximation_size(table: Table) -> np.ndarray:
    """Per row, the size of the approximation: landmarks m, performer's features r or linformer's projected length
    k (one of the three is set, the others are 0)."""
    size = table["landmarks"].astype(np.int64)
    for column in ("features", "projected"):
        if column in table:
            size = size + table[column]
    return size


def read_results(path: Path | str) -> "pandas.DataFrame":
    """The /sweep table of a results file as a pandas DataFrame, one row per evaluated point (strings decoded,
    integers int64, the rest float64; a format version 1 file read as version 3), with the file's root attributes (provenance: command_line, git_revision,
    threads, input, ...) in `df.attrs`."""
    import pandas

    table = read_sweep(path)
    attrs = attributes(path)
    frame = pandas.DataFrame(dict(table))
    frame.attrs.update(attrs)
    return frame


class BenchResults(NamedTuple):
    """The tables of a `nystrom bench` file: /bench (one row per method, N, precision, thread count), /bench_steps
    (PnP-Nystra Algorithm 1 step timings, paper Table 1; no rows with --steps 0) and, when the file has them, the
    GEMM reference rates /bench_gemm, the matrix-free matvec rates /bench_matvec and the whole batches of heads
    /bench_batch (`--batch`; None otherwise)."""

    bench: Table
    steps: Table
    gemm: Table | None
    matvec: Table | None
    batch: Table | None = None


def _read_precision_table(file: h5py.File, path: Path | str, name: str, required: tuple[str, ...],
                          named_dtype: bool) -> Table:
    """One table whose column `precision` (float, double) an older version named `dtype` (float32, float64):
    with named_dtype, read the older way and renamed."""
    if not named_dtype:
        return read_table(file, path, name, required)
    table = read_table(file, path, name, tuple("dtype" if c == "precision" else c for c in required))
    if "dtype" in table:
        table["precision"] = np.asarray([PRECISION_OF_DTYPE.get(v, v) for v in table.pop("dtype")], dtype=object)
    return table


def _read_bench_table(file: h5py.File, path: Path | str, name: str, required: tuple[str, ...]) -> Table:
    """One /bench table as version 3: before it, the column `precision` was `dtype` (float32, float64)."""
    return _read_precision_table(file, path, name, required, format_version(file) < 3)


def read_bench(path: Path | str) -> BenchResults:
    """The tables of a bench results file (as format version 3: `precision` float or double; performer's r in
    `features`, linformer's k in `projected`); checks the format attributes and the columns the bench notebook
    reads."""
    with open_results(path) as file:
        bench = _read_bench_table(file, path, "bench", BENCH_COLUMNS)
        if format_version(file) < 3:
            _sizes_in_their_columns(bench)
        steps = _read_bench_table(file, path, "bench_steps", BENCH_STEP_COLUMNS)
        gemm = _read_bench_table(file, path, "bench_gemm", BENCH_GEMM_COLUMNS) if "bench_gemm" in file else None
        matvec = (_read_bench_table(file, path, "bench_matvec", BENCH_MATVEC_COLUMNS)
                  if "bench_matvec" in file else None)
        batch = read_table(file, path, "bench_batch", BENCH_BATCH_COLUMNS) if "bench_batch" in file else None
    return BenchResults(bench, steps, gemm, matvec, batch)


# notebooks/vision_end_to_end.py (docs/formats.md §2.5): the columns the vision notebook reads. The vision tables
# carry their own format_version: 2; version 1 had `precision` as `dtype` (float32, float64).
VISION_FORMAT_VERSIONS = (1, 2)
VISION_COLUMNS = ("model_window", "image", "n", "configuration", "method", "landmarks", "strategy", "pinv",
                  "pinv_iters", "stabilization", "masks", "precision", "psnr", "ssim", "psnr_drop", "ssim_drop",
                  "psnr_vs_unmodified", "seconds_per_block", "exact_seconds_per_block",
                  "unmodified_seconds_per_block", "time_ratio", "time_ratio_unmodified", "non_finite")
VISION_WINDOW_COLUMNS = ("model_window", "configuration", "method", "landmarks", "strategy", "pinv", "pinv_iters",
                         "stabilization", "layer", "window", "head", "rank", "floor", "relative_spectral_error",
                         "output_relative_error")


class VisionResults(NamedTuple):
    """The tables of a vision results file: /vision (one row per window model, image and configuration) and
    /vision_windows (one row per configuration, layer, sampled window and head)."""

    vision: Table
    windows: Table


def read_vision(path: Path | str) -> VisionResults:
    """The /vision and /vision_windows tables of a results file of notebooks/vision_end_to_end.py (as vision format
    version 2: `precision` float or double); checks the format attributes and the columns the notebook reads."""
    with open_results(path) as file:
        if "vision" not in file:
            raise ValueError(f"{path}: no /vision group (written by notebooks/vision_end_to_end.py)")
        version = format_version(file)
        if version not in VISION_FORMAT_VERSIONS:
            raise ValueError(f"{path}: vision format_version {version} (this reader reads {VISION_FORMAT_VERSIONS})")
        return VisionResults(_read_precision_table(file, path, "vision", VISION_COLUMNS, version == 1),
                             _read_precision_table(file, path, "vision_windows", VISION_WINDOW_COLUMNS, version == 1))


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


def read_spectra(path: Path | str) -> list[LayerSpectra]:
    """Every /spectra/<layer> group of a results file, in file order."""
    layers = []
    with open_results(path) as file:
        for name in _group(file, path, "spectra"):
            group = _group(file, path, f"spectra/{name}")
            datasets = {key: item for key, item in group.items() if isinstance(item, h5py.Dataset)}
            values = {key[3:]: item[...] for key, item in datasets.items() if key.startswith("sv_")}
            ranks = {key[5:]: item[...] for key, item in datasets.items() if key.startswith("rank_")}
            if not values:
                raise ValueError(f"{path}: /spectra/{name} has no sv_* dataset")
            for key, array in values.items():
                if array.ndim != 3:
                    raise ValueError(f"{path}: /spectra/{name}/sv_{key} has shape {array.shape}, expected [B, H, k]")
            attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in group.attrs.items()}
            layers.append(LayerSpectra(name, values, ranks, attrs))
    return layers
