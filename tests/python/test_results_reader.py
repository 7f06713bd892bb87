"""Tests of the package's results reader (python/nystrom/results.py) for the tables of `nystrom bench --batch`
(/bench_batch, docs/formats.md §2.3) and of notebooks/vision_end_to_end.py (/vision, /vision_windows, §2.5), on the
files tests/python/make_fake_results.py writes (its tables transcribed from docs/formats.md, not from the reader)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
from nystrom import results

REPOSITORY = Path(__file__).resolve().parents[2]
FAKE = REPOSITORY / "tests" / "python" / "make_fake_results.py"


@pytest.fixture(scope="module")
def fake(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("fake")
    subprocess.run([sys.executable, str(FAKE), str(folder), "--methods", "pnp-nystra,performer,linformer"],
                   check=True)
    return folder


@pytest.fixture(scope="module")
def minimal(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("minimal")
    subprocess.run([sys.executable, str(FAKE), str(folder), "--minimal"], check=True)
    return folder


def copy_without(source: Path, target: Path, group: str, column: str) -> Path:
    """A copy of a results file with one column of one table removed."""
    with h5py.File(source, "r") as original, h5py.File(target, "w") as copy:
        for key, value in original.attrs.items():
            copy.attrs[key] = value
        for name in original:
            original.copy(original[name], copy, name)
        del copy[group][column]
    return target


def test_bench_batch_is_read_with_every_documented_column(fake):
    batch = results.read_bench(fake / "bench.h5").batch
    assert batch is not None and set(results.BENCH_BATCH_COLUMNS) <= set(batch)
    # 2 precisions × 2 thread counts × 2 shapes × (exact + 3 methods)
    assert batch.rows == 2 * 2 * 2 * 4
    assert batch.values_of("method") == ["exact", "pnp-nystra", "performer", "linformer"]
    assert set(batch["precision"]) == {"float", "double"} and isinstance(batch["method"][0], str)
    assert batch["batch"].dtype == np.int64 and batch["best_seconds"].dtype == np.float64
    assert [key for key, _ in batch.group_by("batch", "heads", "n", "d")] == [(64, 6, 1024, 64), (16, 8, 4096, 64)]
    np.testing.assert_array_equal(batch.where(method="exact")["speedup_vs_exact"], 1.0)
    np.testing.assert_allclose(batch["heads_per_second"], batch["batch"] * batch["heads"] / batch["best_seconds"])
    performer, linformer = batch.where(method="performer"), batch.where(method="linformer")
    assert (performer["landmarks"] == 0).all() and (performer["features"] == 64).all()
    assert (linformer["projected"] == 64).all() and (batch.where(method="pnp-nystra")["landmarks"] == 16).all()


def test_bench_batch_is_optional_and_checked_when_present(fake, minimal, tmp_path):
    assert results.read_bench(minimal / "bench.h5").batch is None  # a file of `bench` without --batch
    incomplete = copy_without(fake / "bench.h5", tmp_path / "bench.h5", "bench_batch", "best_seconds")
    with pytest.raises(ValueError, match=r"/bench_batch lacks required columns \['best_seconds'\]"):
        results.read_bench(incomplete)


def test_a_required_column_stored_as_2d_is_refused_naming_it(fake, tmp_path):
    # It was dropped silently, the table then lacking a required column.
    two_d = tmp_path / "bench.h5"
    shutil.copy(fake / "bench.h5", two_d)
    with h5py.File(two_d, "r+") as file:
        values = file["bench_batch/best_seconds"][()]
        del file["bench_batch/best_seconds"]
        file["bench_batch/best_seconds"] = values.reshape(-1, 1)
    with pytest.raises(ValueError, match=r"/bench_batch columns \['best_seconds'\] are not 1-D datasets"):
        results.read_bench(two_d)


def test_vision_tables_of_version_2_are_read_with_their_precision(fake):
    vision, windows = results.read_vision(fake / "vision.h5")
    assert set(results.VISION_COLUMNS) <= set(vision) and set(results.VISION_WINDOW_COLUMNS) <= set(windows)
    assert vision.rows == 2 * 2 * 14 and "dtype" not in vision  # 2 window models × 2 images × 14 configurations
    np.testing.assert_array_equal(vision["precision"], np.where(vision["landmarks"] < 0, "double", "float"))
    assert set(windows["precision"]) == {"float"}


def test_vision_tables_of_version_1_read_dtype_as_precision(minimal):
    with h5py.File(minimal / "vision.h5", "r") as file:
        assert file.attrs["format_version"] == 1 and "dtype" in file["vision"] and "precision" not in file["vision"]
        written = [value.decode() for value in file["vision/dtype"][()]]
    vision = results.read_vision(minimal / "vision.h5").vision
    assert "dtype" not in vision
    assert list(vision["precision"]) == [{"float32": "float", "float64": "double"}[value] for value in written]


def test_vision_reader_rejects_other_versions_and_missing_columns(fake, tmp_path):
    incomplete = copy_without(fake / "vision.h5", tmp_path / "incomplete.h5", "vision", "precision")
    with pytest.raises(ValueError, match=r"/vision lacks required columns \['precision'\]"):
        results.read_vision(incomplete)
    newer = tmp_path / "newer.h5"
    shutil.copy(fake / "vision.h5", newer)
    with h5py.File(newer, "r+") as file:
        file.attrs["format_version"] = np.int64(3)
    with pytest.raises(ValueError, match="vision format_version 3"):
        results.read_vision(newer)
    with pytest.raises(ValueError, match="no /vision group"):
        results.read_vision(fake / "bench.h5")
