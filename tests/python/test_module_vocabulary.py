"""One vocabulary (lib/include/nystrom/parameters.hpp): every parameter of the library is spelled alike as the module's
keyword, the /sweep column (where it is one) and the program's option (`pinv_iters` ↔ `--pinv-iters`); the program's
other options are the run's own, and where the module has them too they are spelled alike. The old spellings are
deprecated aliases that still work.

The program is $NYSTROM_CLI (ctest passes build/bin/nystrom), else build/bin/nystrom."""

import os
import re
import subprocess
import warnings
from pathlib import Path

import numpy as np
import pytest

import nystrom

REPOSITORY = Path(__file__).resolve().parents[2]
PROGRAM = Path(os.environ.get("NYSTROM_CLI", REPOSITORY / "build" / "bin" / "nystrom"))

# Options of `nystrom sweep` that are not parameters of an approximation: where the points come from and how they are
# evaluated, written and shown.
RUN_OPTIONS = {
    "help", "config", "threads", "seed", "input", "output", "layers", "batch", "heads", "memory", "matrix-free",
    "dense-svd-limit", "device", "reference", "quiet", "stop-after", "precision", "certificates-only",
    "certificate-steps", "certificate-failure",
}
# Deprecated aliases of the program's options, and of the module's keywords.
DEPRECATED_OPTIONS = {"iterations": "pinv-iters", "dtype": "precision", "methods": "method"}
DEPRECATED_KEYWORDS = {"iterations": "pinv_iters", "tolerance": "pinv_tolerance"}
# The evaluation keywords of the module that are the program's run options.
SHARED_RUN_KEYWORDS = {"matrix_free", "memory", "dense_svd_limit", "certificates_only", "certificate_steps",
                       "certificate_failure"}


def keyword(parameter: str) -> str:
    """The module's keyword of a parameter: its name (`lambda` is a Python keyword: `lambda_`)."""
    return "lambda_" if parameter == "lambda" else parameter


def program_options(subcommand: str) -> set[str]:
    assert PROGRAM.is_file(), f"the nystrom program {PROGRAM} is not built (set NYSTROM_CLI)"
    text = subprocess.run([str(PROGRAM), subcommand, "--help"], capture_output=True, text=True, check=True).stdout
    return set(re.findall(r"^\s+(?:-\w \[ )?--([a-z][a-z0-9-]*)", text, flags=re.MULTILINE))


def signature_keywords(function) -> set[str]:
    signature = function.__doc__.split("\n", 1)[0]
    return set(re.findall(r"(\w+): [^,()]+(?:\[[^\]]*\])?[^,()]* = ", signature.split("*,", 1)[1]))


def test_every_parameter_is_a_keyword_of_attention_and_evaluate():
    parameters = [name for name, _ in nystrom.PARAMETERS]
    assert len(parameters) == len(set(parameters))
    for function in (nystrom.attention, nystrom.evaluate):
        keywords = signature_keywords(function)
        missing = [p for p in parameters if keyword(p) not in keywords]
        assert not missing, f"{function.__name__}: parameters without a keyword of their name {missing}"


def test_the_parameter_columns_are_the_record_keys_and_every_key_a_column_or_result():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((24, 4)) for _ in range(3))
    record = nystrom.evaluate(q, k, v, landmarks=4)
    columns = [name for name, column in nystrom.PARAMETERS if column]
    assert not [c for c in columns if c not in record], "parameter columns missing from evaluate()"
    # The kernel's parameter is one column for the three kernels' scale, lambda and bandwidth.
    assert "kernel_param" in record
    for name, column in nystrom.PARAMETERS:
        if not column:
            assert name not in record, f"{name} is not a column but evaluate() returns it"


def test_the_programs_options_are_parameters_in_kebab_form_or_run_options():
    parameters = {name.replace("_", "-") for name, _ in nystrom.PARAMETERS}
    for subcommand in ("sweep", "bench"):
        options = program_options(subcommand)
        unknown = sorted(o for o in options - parameters - RUN_OPTIONS - set(DEPRECATED_OPTIONS)
                         if subcommand == "sweep")
        assert not unknown, f"nystrom {subcommand}: options that are neither parameters nor run options {unknown}"
    sweep = program_options("sweep")
    # The sweep's axes and switches are all there, spelled as the parameters.
    for parameter in ("method", "kernel", "scale", "lambda", "bandwidth", "landmarks", "strategy", "oversampling",
                      "pinv", "pinv-iters", "pinv-tolerance", "stabilization", "features", "projected",
                      "share-projections", "copy-rows", "different-indices", "front-padding"):
        assert parameter in sweep, f"nystrom sweep has no --{parameter}"
    evaluation = signature_keywords(nystrom.evaluate)
    for name in SHARED_RUN_KEYWORDS:
        assert name in evaluation and name.replace("_", "-") in sweep, name


def test_deprecated_spellings_still_work():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((16, 4)) for _ in range(3))
    current = nystrom.attention(q, k, v, landmarks=4, pinv="razavi", pinv_iters=3, pinv_tolerance=1e-300)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = nystrom.attention(q, k, v, landmarks=4, pinv="razavi", iterations=3, tolerance=1e-300)
    assert np.array_equal(current, old)
    assert {str(w.message).split("'")[1] for w in caught if w.category is DeprecationWarning} == set(DEPRECATED_KEYWORDS)
    sweep = program_options("sweep")
    for alias, current_option in DEPRECATED_OPTIONS.items():
        assert alias in sweep and current_option in sweep


@pytest.mark.parametrize("alias", sorted(DEPRECATED_OPTIONS))
def test_an_alias_and_its_option_together_are_refused(alias, tmp_path):
    values = {"iterations": "2", "dtype": "double", "methods": "exact"}
    current = DEPRECATED_OPTIONS[alias]
    result = subprocess.run([str(PROGRAM), "sweep", "-o", str(tmp_path / "r.h5"), f"--{alias}", values[alias],
                             f"--{current}", values[alias]], capture_output=True, text=True)
    assert result.returncode == 2
    assert f"--{current}" in result.stderr and f"--{alias}" in result.stderr
    assert not (tmp_path / "r.h5").exists()
