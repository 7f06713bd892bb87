"""docs/formats.md lists exactly the datasets, attributes and columns `nystrom` writes, with their types, and its NaN
and "none" rules hold.

Run by ctest (`docs_formats`) after the CI results fixture: NYSTROM_PROGRAM is the `nystrom` program,
NYSTROM_CI_RESULTS the folder holding the fixture's sweep.h5, spectrum.h5 and bench.h5 (tests/CMakeLists.txt). The
tables are read from the document (every `<!-- table: NAME -->` line, then a markdown table whose first two cells
are the name and the type), never copied from the program: a column written but not documented, documented but
not written, or of another type fails here. Tiny runs of its own cover `synth` and the rules per method.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENT = ROOT / "docs" / "formats.md"
PROGRAM = os.environ.get("NYSTROM_PROGRAM", "")
CI_RESULTS = Path(os.environ.get("NYSTROM_CI_RESULTS", ""))

SOFTMAX_METHODS = {"nystromformer", "cur", "performer", "linformer"}
WITHOUT_PINV = {"performer", "linformer", "exact"}


def cells(line: str) -> list[str]:
    """The cells of one markdown table row (a `\\|` inside a cell is a literal bar)."""
    parts = re.split(r"(?<!\\)\|", line.strip())[1:-1]
    return [part.strip().replace("\\|", "|") for part in parts]


def document_tables() -> dict[str, list[dict[str, str]]]:
    """Every machine-readable table of the document: NAME -> rows as {header: cell}."""
    lines = DOCUMENT.read_text(encoding="utf-8").splitlines()
    tables: dict[str, list[dict[str, str]]] = {}
    for index, line in enumerate(lines):
        marker = re.fullmatch(r"<!-- table: (.+) -->", line.strip())
        if not marker:
            continue
        header = cells(lines[index + 1])
        assert header[:2] == ["name", "type"], f"table {marker[1]}: header {header}"
        rows = []
        for row_line in lines[index + 3:]:
            if not row_line.startswith("|"):
                break
            row = cells(row_line)
            assert len(row) == len(header), f"table {marker[1]}: row {row_line!r}"
            rows.append(dict(zip(header, row)))
        tables[marker[1]] = rows
    return tables


TABLES = document_tables()


def documented(table: str, written_by: str | None = None) -> dict[str, str]:
    """name -> type of a table, expanding `<X>` by the row's X column; with `written_by`, only rows whose "written
    by" cell names that writer."""
    out: dict[str, str] = {}
    for row in TABLES[table]:
        writers = [part.split()[0] for part in row["written by"].split(",")] if written_by else []
        if written_by is not None and written_by not in writers:
            continue
        name = row["name"].strip("`")
        for x in (row["X"].split(", ") if "<X>" in name else [None]):
            out[name.replace("<X>", x) if x else name] = row["type"]
    return out


def type_name(dtype: np.dtype, shape: tuple[int, ...] = ()) -> str:
    """The document's type vocabulary for an HDF5 dataset or attribute."""
    if h5py.check_string_dtype(dtype) is not None:
        base = "string"
    else:
        base = {np.dtype("int64"): "int64", np.dtype("float64"): "float64", np.dtype("float32"): "float32"}[dtype]
    return f"{base}[{shape[0]}]" if len(shape) == 1 and base != "string" else base


def attribute_types(obj: h5py.HLObject) -> dict[str, str]:
    out = {}
    for name in obj.attrs:
        attribute = h5py.h5a.open(obj.id, name.encode())
        out[name] = type_name(attribute.dtype, attribute.shape)
    return out


def matches(expected: str, actual: str) -> bool:
    return actual in expected.split("|")


def assert_same(kind: str, expected: dict[str, str], actual: dict[str, str]) -> None:
    assert sorted(actual) == sorted(expected), (
        f"{kind}: written but not documented {sorted(set(actual) - set(expected))}, "
        f"documented but not written {sorted(set(expected) - set(actual))}")
    wrong = {name: (expected[name], actual[name]) for name in actual if not matches(expected[name], actual[name])}
    assert not wrong, f"{kind}: documented type != written type: {wrong}"


def table_columns(group: h5py.Group) -> dict[str, str]:
    """Column name -> type of a results table, checking that the columns are equal-length 1-D datasets."""
    lengths = {group[name].shape for name in group}
    assert len(lengths) == 1 and len(next(iter(lengths))) == 1, f"{group.name}: column shapes {lengths}"
    return {name: type_name(group[name].dtype) for name in group}


def run(*arguments: str) -> str:
    assert PROGRAM, "NYSTROM_PROGRAM names the nystrom program (ctest sets it)"
    result = subprocess.run([PROGRAM, *arguments], capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"nystrom {' '.join(arguments)}: exit {result.returncode}\n{result.stderr}"
    return result.stdout


def ci_file(name: str) -> Path:
    path = CI_RESULTS / name
    assert path.is_file(), f"{path}: the CI results fixture (ctest results_*) writes it"
    return path


def sweep_rows(path: Path) -> list[dict]:
    with h5py.File(path, "r") as file:
        group = file["sweep"]
        columns = {name: group[name][()] for name in group}
    count = len(next(iter(columns.values())))
    decode = lambda value: value.decode() if isinstance(value, bytes) else value  # noqa: E731
    return [{name: decode(values[i]) for name, values in columns.items()} for i in range(count)]


# ---------------------------------------------------------------------------------------------------------------
# Names and types against the CI results (formats.md §2) and a synth dump (§1)


@pytest.mark.parametrize("writer, file_name", [("sweep", "sweep.h5"), ("spectrum", "spectrum.h5"),
                                               ("bench", "bench.h5")])
def test_results_root_attributes(writer: str, file_name: str) -> None:
    with h5py.File(ci_file(file_name), "r") as file:
        assert_same(f"{file_name} /", documented("results / attributes", writer), attribute_types(file))
        assert file.attrs["format"] == "nystrom-results"


def test_sweep_columns() -> None:
    with h5py.File(ci_file("sweep.h5"), "r") as file:
        assert_same("/sweep", documented("/sweep"), table_columns(file["sweep"]))


@pytest.mark.parametrize("table", ["/bench", "/bench_steps", "/bench_gemm", "/bench_matvec", "/bench_batch"])
def test_bench_tables(table: str) -> None:
    with h5py.File(ci_file("bench.h5"), "r") as file:
        assert table.strip("/") in file, f"the CI bench (--gemm-n, --matvec-n, --batch) writes {table}"
        assert_same(table, documented(table), table_columns(file[table.strip("/")]))


def test_spectra_groups() -> None:
    with h5py.File(ci_file("spectrum.h5"), "r") as file:
        layers = list(file["spectra"])
        assert layers, "spectrum.h5 has layers"
        shapes = {row["name"].strip("`"): row["shape"] for row in TABLES["/spectra/<layer> datasets"]}
        for layer in layers:
            group = file["spectra"][layer]
            # The bundled dump has `attn`, so every X of the table is written.
            assert_same(f"/spectra/{layer}", documented("/spectra/<layer> datasets"),
                        {name: type_name(group[name].dtype) for name in group})
            assert_same(f"/spectra/{layer} attributes", documented("/spectra/<layer> attributes"),
                        attribute_types(group))
            k = int(group.attrs["k"])
            for name in group:
                documented_shape = shapes.get(name) or shapes[re.sub(r"_[^_]+$", "_<X>", name)]
                shape = group[name].shape
                assert shape == {"[B, H]": shape[:2], "[B, H, k]": shape[:2] + (k,)}[documented_shape], (
                    name, shape, documented_shape)


def test_synth_dump(tmp_path: Path) -> None:
    dump = tmp_path / "dump.h5"
    run("synth", "-o", str(dump), "--kind", "window", "--with-attn", "--layers", "1", "--heads", "2",
        "--tokens", "16", "--dim", "4", "--value-dim", "3")
    with h5py.File(dump, "r") as file:
        assert_same("dump /", documented("dump / attributes", "synth"), attribute_types(file))
        layer = file["layers"]["00"]
        assert_same("dump /layers/00", documented("dump /layers/<layer> datasets", "synth"),
                    {name: type_name(layer[name].dtype) for name in layer})
        assert_same("dump /layers/00 attributes", documented("dump /layers/<layer> attributes", "synth"),
                    attribute_types(layer))


def test_git_revision_is_the_programs() -> None:
    version = run("--version")
    for name in ("sweep.h5", "spectrum.h5", "bench.h5"):
        with h5py.File(ci_file(name), "r") as file:
            revision = file.attrs["git_revision"]
        assert f"({revision})" in version, f"{name}: git_revision {revision!r}, nystrom --version: {version!r}"


# ---------------------------------------------------------------------------------------------------------------
# The NaN, "none" and 0 rules of formats.md §2.1 and the error matrix per method (mathematics.md §7.2)


@pytest.fixture(scope="module")
def every_method(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    folder = tmp_path_factory.mktemp("every_method")
    dump = folder / "dump.h5"
    run("synth", "-o", str(dump), "--layers", "1", "--heads", "1", "--tokens", "32", "--dim", "8",
        "--value-dim", "4", "--seed", "3")
    output = folder / "sweep.h5"
    run("sweep", "-i", str(dump), "-o", str(output), "--quiet", "--kernel", "exp,laplacian",
        "--method", "pnp-nystra,nystromformer,cur,symmetric-nystrom,performer,linformer,exact",
        "--strategy", "step", "--landmarks", "4", "--pinv", "exact,razavi", "--iterations", "2",
        "--stabilization", "row-max,clamped")
    return sweep_rows(output)


def error_matrix_by_method() -> dict[str, str]:
    """The per-method table of formats.md §2.1 (method -> error_matrix)."""
    lines = DOCUMENT.read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines)
                 if line.startswith("|") and cells(line)[:2] == ["method", "`error_matrix`"])
    out = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        row = cells(line)
        out[row[0]] = row[1]
    return out


def test_every_method_has_rows(every_method: list[dict]) -> None:
    methods = {row["method"] for row in every_method}
    assert methods == {"pnp-nystra", "nystromformer", "cur", "symmetric-nystrom", "performer", "linformer", "exact"}
    # Softmax methods exist for the exponential kernel only.
    assert not any(row["method"] in SOFTMAX_METHODS and row["kernel"] != "exp" for row in every_method)


def test_error_matrix(every_method: list[dict]) -> None:
    expected = error_matrix_by_method()
    assert set(expected) >= {row["method"] for row in every_method}
    for row in every_method:
        assert row["error_matrix"] == expected[row["method"]], row["method"]
        assert math.isnan(row["spectral_error"]) == (row["error_matrix"] == "none")
        assert math.isnan(row["relative_spectral_error"]) == (row["error_matrix"] == "none")
        # The dense path (matrix_free = 0 here): a Frobenius error for every method with an error matrix.
        assert row["matrix_free"] == 0
        assert math.isnan(row["frobenius_error"]) == (row["error_matrix"] == "none")


def test_axes_a_method_does_not_have(every_method: list[dict]) -> None:
    for row in every_method:
        method = row["method"]
        assert (row["strategy"] == "none") == (method in {"performer", "linformer", "exact"}), method
        assert (row["pinv"] == "none") == (method in WITHOUT_PINV), method
        assert (row["pinv_status"] == "none") == (method in WITHOUT_PINV), method
        assert math.isnan(row["pinv_residual"]) == (method in WITHOUT_PINV), method
        assert row["pinv_iters"] == (0 if row["pinv"] in ("exact", "none") else 2), method
        assert (row["stabilization"] == "none") == (method != "pnp-nystra"), method
        assert (row["landmarks"] == 0) == (method in {"performer", "linformer", "exact"}), method
        assert (row["features"] == 0) == (method != "performer"), method
        assert (row["projected"] == 0) == (method != "linformer"), method
        if method == "nystromformer":
            assert row["strategy"] == "segment-means"


def test_bound_columns(every_method: list[dict]) -> None:
    for row in every_method:
        pnp = row["method"] == "pnp-nystra"
        for column in ("sigma1_ext", "sigma_m1_ext", "sigma_m1_margin", "sigma_m_core", "theorem3_k", "bound_ratio"):
            assert math.isnan(row[column]) == (not pnp), (row["method"], column)
        for n in (1, 2, 3):
            assert row[f"theorem{n}_applies"] == (0 if math.isnan(row[f"theorem{n}_bound"]) else 1)
            if not pnp:
                assert row[f"theorem{n}_applies"] == 0
        assert row["landmark_terms_converged"] == (1 if pnp else -1), row["method"]
        if not pnp:
            assert row["bounds_hold"] == 1 and row["landmark_seconds"] == 0
            assert math.isnan(row["c_emp"]) and math.isnan(row["c_emp_normalized"])
        else:
            assert math.isnan(row["c_emp"]) == (row["sigma_m1_ext"] == 0)
            # The theorems at σ̄ = σ_{m+1} + its margin, here (a full SVD) (N + m)·eps·σ₁ of the row's precision.
            eps = np.finfo(np.float32 if row["precision"] == "float" else np.float64).eps
            margin = (row["n"] + row["landmarks"]) * eps * row["sigma1_ext"]
            assert row["sigma_m1_margin"] == pytest.approx(margin, rel=1e-12)
            upper = row["sigma_m1_ext"] + row["sigma_m1_margin"]
            assert row["theorem1_applies"] == int(row["sigma_m_core"] > upper)
            assert row["theorem3_applies"] == int(row["theorem3_k"] * upper < row["sigma_m_core"])
            assert row["theorem2_applies"] == int(row["sigma_m_core"] > 0)


def test_output_errors_and_dimensions(every_method: list[dict]) -> None:
    for row in every_method:
        assert row["dv"] == 4 and row["n"] == 32 and row["d"] == 8
        for column in ("output_relative_error", "output_max_error", "output_mean_abs_error"):
            assert np.isfinite(row[column]), (row["method"], column)
        for column in ("seconds", "reference_seconds", "elapsed_seconds"):
            assert row[column] >= 0
        # The log-shift: the head's largest logit (at least 0) for exp, 0 for the other kernels.
        assert row["log_shift"] >= 0 if row["kernel"] == "exp" else row["log_shift"] == 0, row["kernel"]


def test_without_values_and_matrix_free(tmp_path: Path) -> None:
    dump = tmp_path / "dump.h5"
    run("synth", "-o", str(dump), "--layers", "1", "--heads", "1", "--tokens", "32", "--dim", "8",
        "--value-dim", "0")
    output = tmp_path / "sweep.h5"
    run("sweep", "-i", str(dump), "-o", str(output), "--quiet", "--kernel", "exp", "--matrix-free",
        "--method", "pnp-nystra,nystromformer,symmetric-nystrom", "--strategy", "step", "--landmarks", "4",
        "--pinv", "exact")
    rows = sweep_rows(output)
    assert {row["method"] for row in rows} == {"pnp-nystra", "nystromformer", "symmetric-nystrom"}
    for row in rows:
        assert row["dv"] == 0 and row["matrix_free"] == 1
        for column in ("output_relative_error", "output_max_error", "output_mean_abs_error"):
            assert math.isnan(row[column]), (row["method"], column)
        assert np.isfinite(row["spectral_error"])
        # Matrix-free: a Frobenius error for every method, from row panels.
        assert np.isfinite(row["frobenius_error"]), row["method"]
    with h5py.File(output, "r") as file:
        assert file.attrs["matrix_free"] == 1
