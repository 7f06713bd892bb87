"""Shared helpers of the cross-checks: read a case written by tests/test_crosscheck_dump.cpp and compare outputs.

A case directory <build>/crosscheck/<case>_<dtype>/ holds meta.txt (key = value lines) and text matrices
q_<h>.txt, k_<h>.txt, v_<h>.txt, out_<h>.txt (this library's output) plus any random matrices of the method.
Exit status: 0 all cases agree, 1 a mismatch, 77 the case files or the Python packages are missing (ctest SKIP).
"""
import pathlib
import sys

import numpy as np

SKIP = 77
TOLERANCE = {"float32": 2e-5, "float64": 1e-11}  # relative Frobenius difference of the outputs


def case_dirs(root, case):
    dirs = [pathlib.Path(root) / "crosscheck" / f"{case}_{dtype}" for dtype in ("float32", "float64")]
    missing = [str(d) for d in dirs if not (d / "meta.txt").exists()]
    if missing:
        print(f"cross-check inputs missing (run the test_crosscheck_dump test first): {missing}")
        sys.exit(SKIP)
    return dirs


def read_case(directory):
    meta = {}
    for line in (directory / "meta.txt").read_text().splitlines():
        key, value = (part.strip() for part in line.split("="))
        meta[key] = int(value)
    dtype = np.float32 if directory.name.endswith("float32") else np.float64
    load = lambda name: np.atleast_2d(np.loadtxt(directory / name, dtype=dtype))
    heads = meta["heads"]
    stack = lambda prefix: np.stack([load(f"{prefix}_{h}.txt") for h in range(heads)])
    return meta, dtype, load, stack("q"), stack("k"), stack("v"), stack("out")


def compare(name, ours, theirs, dtype_name):
    ours = np.asarray(ours, dtype=np.float64)
    theirs = np.asarray(theirs, dtype=np.float64)
    if ours.shape != theirs.shape:
        print(f"{name}: shapes differ, ours {ours.shape}, package {theirs.shape}")
        return False
    relative = np.linalg.norm(ours - theirs) / np.linalg.norm(theirs)
    ok = relative <= TOLERANCE[dtype_name]
    print(f"{name} [{dtype_name}]: relative difference {relative:.3e} (tolerance {TOLERANCE[dtype_name]:.0e}) "
          f"{'ok' if ok else 'MISMATCH'}")
    return ok


def import_or_skip(module):
    try:
        return __import__(module)
    except ImportError as error:
        print(f"python package missing ({error}); run scripts/setup-python.sh")
        sys.exit(SKIP)


def check_cases(build_dir, cases, package_output):
    """Compares every float32 and float64 case of `cases` with package_output(meta, dtype, load, q, k, v), the
    package's [h, n, d] output on the same inputs. Returns the exit status: 0 all agree, 1 a mismatch."""
    ok = True
    for case in cases:
        for directory in case_dirs(build_dir, case):
            meta, dtype, load, q, k, v, ours = read_case(directory)
            theirs = package_output(meta, dtype, load, q, k, v)
            ok &= compare(case, ours, theirs, directory.name.rsplit("_", 1)[1])
    return 0 if ok else 1
