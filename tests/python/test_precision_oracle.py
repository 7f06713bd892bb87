"""The library's rounding to half and bfloat16 (lib/include/nystrom/precision.hpp) against numpy's float16 and torch's
bfloat16 conversions: this test writes reference vectors, (float32 input, numpy half, torch bfloat16) for a few hundred
thousand inputs of every class and (float64 input, numpy half) for float64 inputs, and runs the C++ test binary
test_precision (the path in NYSTROM_TEST_PRECISION_BINARY, else build/bin/test_precision) on them; that binary
compares round_to with every reference value bit for bit, NaN with any NaN.

What the references do, checked below where it matters:
- numpy rounds float64 → float16 once, directly (1 + 2⁻¹¹ + 2⁻⁴⁰ becomes 1 + 2⁻¹⁰, not 1 as through float32);
- torch's CPU float32 → bfloat16 rounds to nearest even with bfloat16's subnormals and overflow to Inf, but turns
  every NaN into the one pattern 0xffff (sign and payload lost), so a NaN is compared as any NaN;
- torch's float64 → bfloat16 rounds through float32 (1 + 2⁻⁸ + 2⁻⁴⁰ becomes 1), so it is no reference for the
  library's direct rounding from double: the float64 vectors hold numpy's float16 only."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

REPOSITORY = Path(__file__).resolve().parents[2]
CASE = "round_to equals numpy and torch on the vectors of NYSTROM_PRECISION_VECTORS"
FLOAT32_RECORD = np.dtype([("input", "<f4"), ("half", "<f4"), ("bfloat16", "<f4")])  # packed: 12 bytes
FLOAT64_RECORD = np.dtype([("input", "<f8"), ("half", "<f4")])  # packed: 12 bytes
SIGN_EXPONENTS = np.arange(512, dtype=np.uint32) << np.uint32(23)  # every sign and float32 exponent field


def precision_binary() -> Path:
    path = Path(os.environ.get("NYSTROM_TEST_PRECISION_BINARY", REPOSITORY / "build" / "bin" / "test_precision"))
    if not path.is_file():
        pytest.skip(f"the test binary {path} is not built (set NYSTROM_TEST_PRECISION_BINARY)")
    return path


def with_neighbours(values: np.ndarray) -> np.ndarray:
    """values, their neighbours towards ±Inf, and the negatives of all of them."""
    values = np.asarray(values)
    with np.errstate(over="ignore", invalid="ignore"):  # the neighbours of ±max are ±Inf, those of NaN NaN
        around = np.concatenate([values, np.nextafter(values, np.inf), np.nextafter(values, -np.inf)])
    return np.concatenate([around, -around])


def float32_inputs(rng: np.random.Generator) -> np.ndarray:
    """Every sign and exponent field with 256 random significands; significands ending in a rounding tie (and one
    below and above it) at every bit position, with random bits above; half's and bfloat16's thresholds (largest
    value, the midpoint to Inf, smallest normal, subnormals and their ties) with their neighbours; ±0, ±Inf and
    NaNs of several payloads."""
    patterns = [(SIGN_EXPONENTS[:, None] | rng.integers(0, 1 << 23, (512, 256), dtype=np.uint32)).ravel()]
    for kept in range(1, 24):
        tie = 1 << (kept - 1)
        above = rng.integers(0, 1 << 23, (512, 4), dtype=np.uint32) & np.uint32(0x7FFFFF & ~((tie << 1) - 1))
        for low in (tie - 1, tie, tie + 1):
            patterns.append((SIGN_EXPONENTS[:, None] | above | np.uint32(low)).ravel())
    specials = np.array([0x7F7F0000, 0x7F7F8000, 0x7F7FFFFF, 0x00008000, 0x00018000, 0x00000001, 0x00800000,
                         0x7F800000, 0x7F800001, 0x7FC00000, 0x7FFFFFFF, 0x7FA00000, 0x7F802000], dtype=np.uint32)
    patterns.append(with_neighbours(specials.view(np.float32)).view(np.uint32))
    half_thresholds = np.array([65504, 65520, 65536, 2.0**-14, 2.0**-24, 2.0**-25, 3 * 2.0**-25, 1023.5 * 2.0**-24, 0],
                               dtype=np.float32)
    patterns.append(with_neighbours(half_thresholds).view(np.uint32))
    return np.concatenate(patterns).view(np.float32)


def float64_inputs(rng: np.random.Generator) -> np.ndarray:
    """Random significands over every binary exponent from 2⁻⁶⁰ to 2⁴⁰ and a sample of the rest of the range; half's
    ties at every spacing from subnormal to largest, pushed one double ulp either way (where a detour through float32
    would round twice); half's thresholds with their neighbours; double subnormals, ±0, ±Inf, NaN."""
    exponents = np.concatenate([np.repeat(np.arange(-60, 41), 1000), rng.integers(-1074, 1024, 20000)])
    significands = 1 + rng.integers(0, 1 << 52, exponents.size, dtype=np.uint64) * 2.0**-52
    signs = np.where(rng.integers(0, 2, exponents.size) == 1, -1.0, 1.0)
    random = signs * np.ldexp(significands, exponents)
    # (s + ½)·2^q with 2^q half's spacing: s < 2^11 for the subnormals and the smallest binade (q = −24), s in
    # [2^10, 2^11) for the binade [2^(q+10), 2^(q+11)) above.
    spacings = np.repeat(np.arange(-24, 6), 200)
    steps = rng.integers(np.where(spacings == -24, 0, 1 << 10), 1 << 11).astype(np.float64)
    ties = np.ldexp(steps + 0.5, spacings)
    thresholds = np.array([65504, 65520, 65536, 2.0**-14, 2.0**-24, 2.0**-25, 1 + 2.0**-11 + 2.0**-40, 5e-324, 1e300])
    specials = np.array([0.0, np.inf, np.nan])
    return np.concatenate([random, with_neighbours(ties), with_neighbours(thresholds), specials, -specials])


def half_reference(values: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore", invalid="ignore"):
        return values.astype(np.float16).astype(np.float32)


def bfloat16_reference(values: np.ndarray) -> np.ndarray:
    return torch.from_numpy(values).to(torch.bfloat16).to(torch.float32).numpy()


def write_vectors(path: Path, inputs32: np.ndarray, inputs64: np.ndarray) -> None:
    """The file the C++ test case reads: b"NYPREC01", the little-endian uint64 counts, the packed records."""
    records32 = np.empty(inputs32.size, FLOAT32_RECORD)
    records32["input"], records32["half"], records32["bfloat16"] = (
        inputs32, half_reference(inputs32), bfloat16_reference(inputs32))
    records64 = np.empty(inputs64.size, FLOAT64_RECORD)
    records64["input"], records64["half"] = inputs64, half_reference(inputs64)
    with path.open("wb") as file:
        file.write(b"NYPREC01" + np.array([inputs32.size, inputs64.size], "<u8").tobytes())
        file.write(records32.tobytes())
        file.write(records64.tobytes())


def test_the_references_round_as_documented():
    assert half_reference(np.array([1 + 2.0**-11 + 2.0**-40]))[0] == 1 + 2.0**-10  # numpy: direct from float64
    assert half_reference(np.array([65520.0], np.float32))[0] == np.inf
    bfloat16 = bfloat16_reference(np.array([0x7F7F8000, 0x7F7F7FFF, 0x00008000, 0x00018000, 0x7F800001],
                                           np.uint32).view(np.float32)).view(np.uint32)
    assert list(bfloat16[:4]) == [0x7F800000, 0x7F7F0000, 0, 0x00020000]  # torch: nearest even, subnormals, Inf
    assert np.isnan(bfloat16[4:].view(np.float32)).all()


def test_round_to_equals_numpy_and_torch(tmp_path):
    binary = precision_binary()
    rng = np.random.default_rng(20190917)
    inputs32, inputs64 = float32_inputs(rng), float64_inputs(rng)
    assert inputs32.size > 200_000 and inputs64.size > 100_000
    vectors = tmp_path / "precision_vectors.bin"
    write_vectors(vectors, inputs32, inputs64)
    result = subprocess.run([str(binary), f"--test-case={CASE}", "--no-skip"], capture_output=True, text=True,
                            env={**os.environ, "NYSTROM_PRECISION_VECTORS": str(vectors)}, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert re.search(rf"checked {inputs32.size} float32 and {inputs64.size} float64 reference vectors", output), output
