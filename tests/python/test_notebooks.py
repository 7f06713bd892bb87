"""Tests of the notebooks' reader (notebooks/nystrom_results.py) and of the committed notebooks being what
notebooks/make_notebooks.py generates. Executing the notebooks is tests/python/run_notebooks.sh's job."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

REPOSITORY = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPOSITORY / "notebooks"))

import make_notebooks  # noqa: E402
import nystrom_results as nr  # noqa: E402


@pytest.fixture(scope="module")
def fake_results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("results")
    subprocess.run([sys.executable, str(REPOSITORY / "tests/python/make_fake_results.py"), str(folder),
                    "--methods", "pnp-nystra,performer"], check=True)
    return folder


@pytest.mark.parametrize("name", sorted(make_notebooks.NOTEBOOKS))
def test_committed_notebook_matches_its_generator(name):
    committed = (REPOSITORY / "notebooks" / name).read_text(encoding="utf-8")
    assert committed == make_notebooks.render(name), f"run notebooks/make_notebooks.py to regenerate {name}"


def test_read_sweep_returns_typed_equal_length_columns(fake_results):
    table = nr.read_sweep(fake_results / "sweep.h5")
    for column in nr.REQUIRED_COLUMNS:
        assert len(table[column]) == table.rows
    assert table["method"].dtype == object and isinstance(table["method"][0], str)
    assert table["landmarks"].dtype == np.int64 and table["spectral_error"].dtype == np.float64
    assert table.values_of("method") == ["pnp-nystra", "performer"]
    performer = table.where(method="performer")
    assert performer.rows > 0 and np.isnan(performer["spectral_error"]).all()
    # Format version 3 (/sweep as in 2): performer's feature count in `features`, `landmarks` = m (0 without landmarks).
    assert (performer["landmarks"] == 0).all() and (performer["features"] > 0).all()
    np.testing.assert_array_equal(nr.approximation_size(performer), performer["features"])
    exact = table.where(table["pinv_iters"] == 0, method="pnp-nystra")
    assert set(exact["pinv"]) == {"exact"}


def test_read_sweep_rejects_foreign_files(tmp_path, fake_results):
    with pytest.raises(FileNotFoundError, match="no such results file"):
        nr.read_sweep(tmp_path / "absent.h5")
    for name, format_name, version, message in (("dump", "nystrom-dump", 1, "expected 'nystrom-results'"),
                                                ("future", "nystrom-results", 5, "unknown format_version")):
        path = tmp_path / f"{name}.h5"
        with h5py.File(path, "w") as file:
            file.attrs["format"] = format_name
            file.attrs["format_version"] = version
        with pytest.raises(ValueError, match=message):
            nr.read_sweep(path)
    incomplete = tmp_path / "incomplete.h5"
    with h5py.File(fake_results / "sweep.h5", "r") as source, h5py.File(incomplete, "w") as file:
        for key, value in source.attrs.items():
            file.attrs[key] = value
        source.copy("sweep", file)
        del file["sweep/theorem2_bound"]
    with pytest.raises(ValueError, match="theorem2_bound"):
        nr.read_sweep(incomplete)


def test_figures_of_a_file_name_its_reference(tmp_path, fake_results, monkeypatch):
    with h5py.File(fake_results / "sweep.h5", "r") as source:
        attributes = dict(source.attrs)
    notes = {}
    for reference in ("model", "kernel", None):  # None: a file written before the attribute existed
        path = tmp_path / f"{reference}.h5"
        with h5py.File(path, "w") as file:
            for key, value in attributes.items():
                if key != "reference":
                    file.attrs[key] = value
            if reference:
                file.attrs["reference"] = reference
        notes[reference] = nr.reference_note(path)
    assert "--reference model" in notes["model"] and "bias + mask" in notes["model"]
    assert "--reference kernel" in notes["kernel"] and notes[None] == notes["kernel"]
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    monkeypatch.setenv("NYSTROM_FIGURES", str(tmp_path / "figures"))
    figure, _ = plt.subplots()
    assert nr.save_figure(figure, "with_footer", results=tmp_path / "model.h5").is_file()
    assert [text.get_text() for text in figure.texts] == [notes["model"]]
    plt.close(figure)


def test_model_scored_layers_are_those_whose_bias_or_mask_the_exact_side_applied(tmp_path, fake_results):
    with h5py.File(fake_results / "sweep.h5", "r") as source:
        attributes = dict(source.attrs)
    applied = ("model: exp(phi(q, k) + bias + mask - c) of each head and its rows normalised, the model's attention "
               "softmax(s q k^T + bias + mask) for exp: bias applied (layers 00, 08), mask applied (layers 08, 17); "
               "layers without them: the kernel(q, k) of each head's q and k alone (exp: exp(s q k^T))")
    not_applied = ("kernel(q, k) of each head's q and k alone (exp: exp(s q k^T)); not the model's attention "
                   "softmax(s q k^T + bias + mask): bias not applied (layers 00, 08)")
    layers = {}
    for name, reference, text in (("model", "model", applied), ("kernel", "kernel", not_applied),
                                  ("plain", "model", "model: no selected layer has a bias or mask, so the kernel")):
        path = tmp_path / f"{name}.h5"
        with h5py.File(path, "w") as file:
            for key, value in attributes.items():
                file.attrs[key] = value
            file.attrs["reference"] = reference
            file.attrs["attention_reference"] = text
        layers[name] = nr.model_scored_layers(path)
    assert layers == {"model": ["00", "08", "17"], "kernel": [], "plain": []}


def test_read_sweep_reads_version_1_sizes_into_their_columns(tmp_path):
    """A version 1 file held performer's r and linformer's k in `landmarks`; it is read as version 3."""
    folder = tmp_path / "v1"
    subprocess.run([sys.executable, str(REPOSITORY / "tests/python/make_fake_results.py"), str(folder), "--minimal",
                    "--methods", "pnp-nystra,performer,linformer"], check=True)
    with h5py.File(folder / "sweep.h5", "r") as file:
        assert int(file.attrs["format_version"]) == 1
        stored = {m: file["sweep/landmarks"][...][file["sweep/method"].asstr()[...] == m] for m in ("performer", "linformer")}
    table = nr.read_sweep(folder / "sweep.h5")
    performer, linformer = table.where(method="performer"), table.where(method="linformer")
    np.testing.assert_array_equal(performer["features"], stored["performer"])
    np.testing.assert_array_equal(linformer["projected"], stored["linformer"])
    assert (performer["landmarks"] == 0).all() and (linformer["landmarks"] == 0).all()
    assert (performer["projected"] == 0).all() and (table.where(method="pnp-nystra")["features"] == 0).all()
    np.testing.assert_array_equal(nr.approximation_size(linformer), stored["linformer"])


def test_read_spectra_normalizes_and_counts_rank(tmp_path):
    path = tmp_path / "spectrum.h5"
    sv = np.array([[[4.0, 2.0, 1e-8, np.nan], [2.0, 2.0, 2.0, 2.0]]])  # [B=1, H=2, k=4], NaN-padded head 0
    with h5py.File(path, "w") as file:
        file.attrs["format"] = "nystrom-results"
        file.attrs["format_version"] = np.int64(1)
        group = file.create_group("spectra/03")
        group.create_dataset("sv_G", data=sv)
        group.attrs["k"], group.attrs["N"], group.attrs["rank_tol"] = 4, 4, 1e-6
    (layer,) = nr.read_spectra(path)
    assert layer.layer == "03"
    np.testing.assert_allclose(layer.normalized("G"), [[1, 0.5, 2.5e-9, np.nan], [1, 1, 1, 1]])
    rank, lower_bound = layer.numerical_rank("G")
    assert rank == pytest.approx((2 + 4) / 2) and lower_bound  # head 1 keeps all k values above tol


def test_median_and_quartiles_skip_nan():
    x = np.array([8, 8, 8, 16, 16, 32])
    y = np.array([1.0, 3.0, 2.0, np.nan, 5.0, np.nan])
    xs, median, low, high = nr.median_and_quartiles(x.astype(float), y)
    np.testing.assert_array_equal(xs, [8, 16])
    np.testing.assert_allclose(median, [2.0, 5.0])
    np.testing.assert_allclose(low, [1.5, 5.0])
    np.testing.assert_allclose(high, [2.5, 5.0])


def write_results_file(path, tables, version=1):
    """A results file holding `tables` ({group: {column: values}}), strings as variable-length UTF-8 like `nystrom`."""
    with h5py.File(path, "w") as file:
        file.attrs["format"] = "nystrom-results"
        file.attrs["format_version"] = np.int64(version)
        for name, columns in tables.items():
            group = file.create_group(name)
            for column, values in columns.items():
                values = np.asarray(values)
                if values.dtype.kind in "OU":
                    group.create_dataset(column, data=values.astype(object), dtype=h5py.string_dtype("utf-8"))
                else:
                    group.create_dataset(column, data=values)


BENCH_ROWS = {
    "method": ["exact", "pnp-nystra", "exact"], "n": [256, 256, 512], "d": [64, 64, 64], "dv": [64, 64, 64],
    "dtype": ["float32", "float32", "float64"], "threads": [1, 1, 2], "landmarks": [0, 16, 0],
    "seconds": [1e-3, 2e-5, 8e-3], "flops": [1.6e7, 4.0e5, 6.7e7], "gflops": [16.0, 20.0, 8.4],
    "speedup_vs_exact": [1.0, 50.0, 1.0], "output_relative_error": [0.0, 0.03, 0.0],
    "blas_core": ["SkylakeX"] * 3,
}
STEP_ROWS = {
    "step": ["1 landmarks", "2 G_L"], "step_index": [1, 2], "n": [256, 256], "d": [64, 64],
    "dtype": ["float32", "float32"], "threads": [1, 1], "landmarks": [16, 16], "seconds": [1e-6, 3e-6],
    "fraction": [0.25, 0.75], "blas_core": ["SkylakeX"] * 2,
}


def test_read_bench_returns_the_rows_written(tmp_path):
    """A version 1 file (`dtype` float32/float64) read as version 3 (`precision` float/double)."""
    path = tmp_path / "bench.h5"
    write_results_file(path, {"bench": BENCH_ROWS, "bench_steps": STEP_ROWS})
    bench, steps, gemm, matvec, batch = nr.read_bench(str(path))
    assert gemm is None and matvec is None and batch is None  # optional tables absent: not required
    assert bench.rows == 3 and steps.rows == 2
    assert list(bench["method"]) == BENCH_ROWS["method"] and isinstance(bench["precision"][0], str)
    assert "dtype" not in bench and "dtype" not in steps
    assert list(bench["precision"]) == ["float", "float", "double"] and list(steps["precision"]) == ["float"] * 2
    np.testing.assert_array_equal(bench["n"], [256, 256, 512])
    np.testing.assert_array_equal(bench["speedup_vs_exact"], [1.0, 50.0, 1.0])
    assert bench.where(method="pnp-nystra", precision="float")["output_relative_error"].tolist() == [0.03]
    assert list(steps["step"]) == ["1 landmarks", "2 G_L"]
    np.testing.assert_array_equal(steps["fraction"], [0.25, 0.75])


@pytest.mark.parametrize("version", [2, 3])
def test_read_bench_reads_sizes_and_precision_of_versions_2_and_3_alike(tmp_path, version):
    """Version 2 held performer's r and linformer's k in /bench's `landmarks` and the arithmetic in `dtype`;
    version 3 has `precision`, `features` and `projected` as /sweep. Both read the same."""
    rows = {"method": ["pnp-nystra", "performer", "linformer"], "n": [256] * 3, "d": [64] * 3, "dv": [64] * 3,
            "threads": [1] * 3, "seconds": [2e-5, 3e-5, 4e-5], "flops": [4e5, 5e5, 6e5], "gflops": [20.0, 16.7, 15.0],
            "speedup_vs_exact": [50.0, 33.3, 25.0], "output_relative_error": [0.03, 0.2, 0.1],
            "blas_core": ["SkylakeX"] * 3}
    if version == 2:
        rows.update(dtype=["float64"] * 3, landmarks=[16, 64, 32])
    else:
        rows.update(precision=["double"] * 3, landmarks=[16, 0, 0], features=[0, 64, 0], projected=[0, 0, 32])
    path = tmp_path / "bench.h5"
    steps = {k: v for k, v in STEP_ROWS.items() if k != "dtype"}
    steps["precision" if version == 3 else "dtype"] = ["double" if version == 3 else "float64"] * 2
    write_results_file(path, {"bench": rows, "bench_steps": steps}, version)
    bench = nr.read_bench(path).bench
    assert list(bench["precision"]) == ["double"] * 3 and "dtype" not in bench
    np.testing.assert_array_equal(bench["landmarks"], [16, 0, 0])
    np.testing.assert_array_equal(bench["features"], [0, 64, 0])
    np.testing.assert_array_equal(bench["projected"], [0, 0, 32])
    np.testing.assert_array_equal(nr.approximation_size(bench), [16, 64, 32])


def test_read_bench_reads_the_optional_gemm_tables_and_rejects_incomplete_files(tmp_path):
    gemm_rows = {"device": ["cpu"], "dtype": ["float32"], "threads": [1], "n": [4096], "seconds": [0.5],
                 "gflops": [275.0], "blas_core": ["SkylakeX"]}
    matvec_rows = {**{k: v * 2 for k, v in gemm_rows.items()}, "n": [1024, 2048], "d": [64, 64],
                   "gemm_fraction": [0.1, 0.2]}
    path = tmp_path / "bench.h5"
    write_results_file(path, {"bench": {**BENCH_ROWS, "gemm_fraction": [0.6, 0.1, 0.5]}, "bench_steps": STEP_ROWS,
                              "bench_gemm": gemm_rows, "bench_matvec": matvec_rows})
    results = nr.read_bench(path)
    assert results.gemm.rows == 1 and results.gemm["gflops"][0] == 275.0 and results.gemm["device"][0] == "cpu"
    np.testing.assert_array_equal(results.matvec["n"], [1024, 2048])
    np.testing.assert_array_equal(results.bench["gemm_fraction"], [0.6, 0.1, 0.5])

    without = {k: v for k, v in BENCH_ROWS.items() if k != "speedup_vs_exact"}
    write_results_file(path, {"bench": without, "bench_steps": STEP_ROWS})
    with pytest.raises(ValueError, match="speedup_vs_exact"):
        nr.read_bench(path)
    write_results_file(path, {"bench": BENCH_ROWS})
    with pytest.raises(ValueError, match="no /bench_steps"):
        nr.read_bench(path)
    write_results_file(path, {"bench": {**BENCH_ROWS, "seconds": [1.0, 2.0]}, "bench_steps": STEP_ROWS})
    with pytest.raises(ValueError, match="different lengths"):
        nr.read_bench(path)
    incomplete_matvec = {k: v for k, v in matvec_rows.items() if k != "gemm_fraction"}
    write_results_file(path, {"bench": BENCH_ROWS, "bench_steps": STEP_ROWS, "bench_matvec": incomplete_matvec})
    with pytest.raises(ValueError, match="bench_matvec lacks required columns"):
        nr.read_bench(path)


def test_fake_bench_files_hold_what_the_notebook_is_tested_on(fake_results, tmp_path):
    bench, steps, gemm, matvec, batch = nr.read_bench(fake_results / "bench.h5")
    configurations, sizes = 2 * 2, 7  # float32/float64 × 1/2 threads; N = 64 … 4096
    assert bench.values_of("method") == ["exact", "pnp-nystra", "performer"]
    assert bench.rows == configurations * sizes * 3 and steps.rows == configurations * sizes * 7
    assert gemm.rows == configurations and matvec.rows == configurations * 3
    np.testing.assert_array_equal(bench.where(method="exact")["speedup_vs_exact"], 1.0)
    assert set(bench["precision"]) == {"float", "double"}
    performer = bench.where(method="performer")
    assert (performer["landmarks"] == 0).all() and (performer["features"] > 0).all()
    for _, group in steps.group_by("precision", "threads", "n"):
        assert group["fraction"].sum() == pytest.approx(1.0)
    subprocess.run([sys.executable, str(REPOSITORY / "tests/python/make_fake_results.py"), str(tmp_path),
                    "--minimal"], check=True)
    minimal = nr.read_bench(tmp_path / "bench.h5")
    assert minimal.gemm is None and minimal.matvec is None and minimal.steps.rows == 0
    assert "gemm_fraction" not in minimal.bench and "device" not in minimal.bench
    assert minimal.bench.values_of("method") == ["pnp-nystra"]
    assert set(minimal.bench["precision"]) == {"float"} and "dtype" not in minimal.bench


def test_group_by_keeps_first_seen_order_and_ignores_absent_columns():
    table = nr.Table({"dtype": np.array(["f64", "f32", "f64", "f32"], dtype=object), "threads": np.array([1, 1, 2, 1]),
                      "seconds": np.array([1.0, 2.0, 3.0, 4.0])})
    groups = table.group_by("device", "dtype", "threads")
    assert [key for key, _ in groups] == [("f64", 1), ("f32", 1), ("f64", 2)]
    assert [rows["seconds"].tolist() for _, rows in groups] == [[1.0], [2.0, 4.0], [3.0]]
    (key, everything), = table.group_by("device")
    assert key == () and everything.rows == 4
    assert table.where(table["seconds"] > 9).group_by("dtype") == []
