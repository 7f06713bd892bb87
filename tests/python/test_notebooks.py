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
    exact = table.where(table["pinv_iters"] == 0, method="pnp-nystra")
    assert set(exact["pinv"]) == {"exact"}


def test_read_sweep_rejects_foreign_files(tmp_path, fake_results):
    with pytest.raises(FileNotFoundError, match="no such results file"):
        nr.read_sweep(tmp_path / "absent.h5")
    for name, format_name, version, message in (("dump", "nystrom-dump", 1, "expected 'nystrom-results'"),
                                                ("future", "nystrom-results", 2, "unknown format_version")):
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
