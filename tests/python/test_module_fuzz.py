"""Fuzz tests of the Python module `nystrom`: seeded random calls of its array functions with random shapes (empty
ones included), dtypes, layouts (Fortran order, reversed and strided views, broadcast rows, nested lists), NaN,
infinities, equal tokens, bad options and sizes too large to allocate; and every array function on every pair of
small and empty shapes. A call may return, raise ValueError or TypeError with a message, or MemoryError saying "out
of memory" (nanobind's own said only "std::bad_alloc"); anything else is a bug: a crash of the interpreter, a
call that does not return, another exception, an empty message, or NaN in an array of the result of an ordinary
call (finite entries of magnitude 1 at most, no option NaN, infinite or driving the kernel's exp out of range).
Such fuzzing found segmentation faults of kernel_norm and kernel_singular_values on empty tokens and of safe_alpha
on empty matrices.

The calls run in a worker, this file run as a script (`python test_module_fuzz.py random SEED CALLS` or
`python test_module_fuzz.py grid NAME`), which prints each call before making it and its outcome after: a crash
fails the test naming the call that caused it instead of killing pytest."""

from __future__ import annotations

import math
import random
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest

import nystrom

# A call running longer is killed by SIGALRM, which the test reports as a hang; a worker running longer (hung
# between calls) fails its test by subprocess.TimeoutExpired.
CALL_SECONDS = 20
WORKER_SECONDS = 300
RANDOM_SEEDS = range(8)
RANDOM_CALLS = 400
# Each grid call on ones of every pair of these shapes (a, b), in both dtypes.
GRID_SHAPES = ((0, 0), (0, 3), (3, 0), (1, 3), (0,), (3,))
GRID_DTYPES = ("float32", "float64")
GRID_CALLS = {
    "safe_alpha": "nystrom.safe_alpha(a)",
    "singular_values": "nystrom.singular_values(a)",
    "top_singular_values": "nystrom.top_singular_values(a, 1)",
    "top_singular_values_augmented": "nystrom.top_singular_values(a, 1, augmented=True)",
    "pseudoinverse": "nystrom.pseudoinverse(a)",
    "pseudoinverse_razavi": "nystrom.pseudoinverse(a, pinv='razavi')",
    "kernel_matrix": "nystrom.kernel_matrix(a, b)",
    "kernel_matrix_laplacian": "nystrom.kernel_matrix(a, b, kernel='laplacian')",
    "attention_matrix": "nystrom.attention_matrix(a, b)",
    "kernel_norm": "nystrom.kernel_norm(a, b)",
    "kernel_norm_dense": "nystrom.kernel_norm(a, b, solver='dense')",
    "kernel_norm_matrix_free": "nystrom.kernel_norm(a, b, solver='matrix-free')",
    "kernel_singular_values": "nystrom.kernel_singular_values(a, b, 1)",
    "attention_exact": "nystrom.attention(a, b, b, method='exact')",
    "attention": "nystrom.attention(a, b, b, landmarks=1)",
    "approximate": "nystrom.approximate(a, b, b, landmarks=1)",
    "evaluate": "nystrom.evaluate(a, b, b, landmarks=1)",
    "evaluate_without_v": "nystrom.evaluate(a, b, landmarks=1)",
    "nystrom_factors": "nystrom.nystrom_factors(a, b, landmarks=1)",
    "select_landmarks": "nystrom.select_landmarks(a, b, landmarks=1)",
    "output_errors": "nystrom.output_errors(a, b)",
    "theorem3_constant": "nystrom.theorem3_constant(a, a.T, b)",
    "numerical_rank": "nystrom.numerical_rank(a.ravel())",
    "energy_fraction": "nystrom.energy_fraction(a.ravel(), 0)",
    "time_attention": "nystrom.time_attention(a, b, b, landmarks=1, repeat=1)",
}
RANDOM_FUNCTIONS = ("approximate", "attention", "evaluate", "nystrom_factors", "select_landmarks", "pseudoinverse",
                    "time_attention", "attention_matrix", "kernel_matrix", "error_norm", "landmark_terms",
                    "kernel_norm", "kernel_singular_values", "error_singular_values", "top_singular_values",
                    "singular_values", "safe_alpha", "output_errors", "theorem3_constant", "numerical_rank",
                    "energy_fraction")
# Each option: how often a call passes it, its ordinary values (valid or not), and its extreme values (NaN,
# infinite, or driving the kernel's exp out of floating-point range), after which a result may hold NaN.
OPTIONS = {
    "method": (0.2, (*nystrom.METHODS, "bogus", ""), ()),
    "kernel": (0.2, (*nystrom.KERNELS, "nope"), ()),
    "scale": (0.15, (None, 0.0, -1.0, 0.125), (math.nan, math.inf, 1e-300, 1e300, 50.0)),
    "lambda_": (0.1, (4.0, 0.0, -1.0), (math.nan, math.inf, 1e-300, 1e300)),
    "bandwidth": (0.1, (8.0, 0.0, -1.0), (math.nan, 1e-300)),
    "landmarks": (0.2, (-1, 0, 1, 2, 3, 16, 17, 64, 100, 101, 10**12), ()),
    "strategy": (0.2, (*nystrom.STRATEGIES, "xx"), ()),
    "seed": (0.1, (0, 1, -1, 2**63 - 1), ()),
    "window": (0.07, (None, (0, 0), (1, 1), (4, 4), (-1, 2), (1000, 1000), (3, 11)), ()),
    "window_grid": (0.05, ("aspect", "square", "x"), ()),
    "prefix_tokens": (0.07, (-1, 0, 1, 2, 16, 1000), ()),
    "different_indices": (0.035, (True,), ()),
    "forced": (0.05, ([], [0], [0, 0], [-1], [10**6], [1, 2, 3]), ()),
    "q_indices": (0.035, ([], [0], [0, 0], [-1], [10**6], list(range(16))), ()),
    "k_indices": (0.035, ([], [0], [1], [-5], list(range(16))), ()),
    "embed_column": (0.035, (-1, 0, 1, 100), ()),
    "kmeans_iterations": (0.035, (-1, 0, 1, 25), ()),
    "pinv": (0.15, (*nystrom.PINV_METHODS, "svd"), ()),
    "pinv_iters": (0.1, (-1, 0, 1, 6, 50), ()),
    "alpha": (0.07, (None, -1.0, 0.0, 1.0), (1e-300, math.nan, math.inf, 1e300)),
    "pinv_tolerance": (0.07, (None, -1.0, 0.0, 1e-6), (math.nan, 1e300)),
    "tikhonov": (0.07, (None, -1.0, 0.0, 1e-6), (math.nan, 1e300)),
    "shift": (0.07, (None, -1.0, 0.0, 1e-6), (math.inf,)),
    "stabilization": (0.1, (*nystrom.STABILIZATIONS, "max"), ()),
    "clamp_threshold": (0.07, (0.0, 5.0), (math.nan, math.inf, -math.inf, 1e30, -1e30)),
    "features": (0.07, (None, -1, 0, 1, 16, 10**12), ()),
    "projected": (0.07, (None, -1, 0, 1, 16, 10**12), ()),
    "share_projections": (0.035, (True,), ()),
    "copy_rows": (0.035, (True,), ()),
    "front_padding": (0.035, (True,), ()),
    "solver": (0.5, ("dense", "lanczos", "matrix-free", "bad"), ()),
    "subspace": (0.1, (-1, 0, 1, 2, 1000), ()),
    "max_restarts": (0.07, (-1, 0, 1, 1000), ()),
    "spectral_tolerance": (0.07, (-1.0, 0.0, 1e-13, 1.0), (math.nan,)),
    "panel_rows": (0.1, (-1, 0, 1, 128, 10**9), ()),
    "matrix_free": (0.07, (True,), ()),
    "memory": (0.07, (-1.0, 0.0, 1.0, 4e9), (math.nan, 1e300)),
    "dense_svd_limit": (0.07, (-1, 0, 1, 256), ()),
    "augmented": (0.1, (True,), ()),
    "repeat": (1.0, (-1, 0, 1, 2), ()),
}
SELECTION_OPTIONS = ("landmarks", "strategy", "seed", "window", "window_grid", "prefix_tokens", "different_indices",
                     "forced", "q_indices", "k_indices", "embed_column", "kmeans_iterations")
PINV_OPTIONS = ("pinv", "pinv_iters", "alpha", "pinv_tolerance", "tikhonov", "shift")
FACTORS_OPTIONS = ("method", "kernel", "scale", "lambda_", "bandwidth", *SELECTION_OPTIONS, *PINV_OPTIONS,
                   "stabilization", "clamp_threshold")
OUTPUT_OPTIONS = (*FACTORS_OPTIONS, "features", "projected", "share_projections", "copy_rows", "front_padding")
KERNEL_OPTIONS = ("kernel", "scale", "lambda_", "bandwidth")
SPECTRAL_OPTIONS = ("subspace", "max_restarts", "spectral_tolerance", "panel_rows")
# The result types holding arrays, which the NaN check looks into.
RESULT_TYPES = (nystrom.Approximation, nystrom.NystromFactors, nystrom.Landmarks, nystrom.PinvResult,
                nystrom.SpectralResult)


# ---------------------------------------------------------------------------------------------------------------
# the worker: prints "call: DESCRIPTION" before each call and "outcome: ..." after

def nan_arrays(result, path="result"):
    """The paths of the float arrays holding NaN in a result: itself, or the attributes of the module's results."""
    if isinstance(result, np.ndarray):
        return [path] if result.dtype.kind == "f" and np.isnan(result).any() else []
    if isinstance(result, nystrom.SpectralResult) and not result.converged:
        return []  # a Lanczos run that stopped short reports the values it did not reach as NaN
    if isinstance(result, RESULT_TYPES):
        return [found for name in dir(result) if not name.startswith("_")
                for found in nan_arrays(getattr(result, name), f"{path}.{name}")]
    return []


def make_call(description, ordinary, function, *arguments, **options):
    """Prints the call, makes it, prints its outcome: ok, rejected (ValueError or TypeError with a message, or
    MemoryError saying "out of memory") or bad (another exception, an empty message, or NaN in an array of the result
    although the call was `ordinary`: finite inputs and options). Returns the result, None when the call raised."""
    print(f"call: {description}", flush=True)
    signal.alarm(CALL_SECONDS)
    try:
        result = function(*arguments, **options)
    except Exception as error:
        signal.alarm(0)
        message = " ".join(str(error).split())
        clear = (isinstance(error, (ValueError, TypeError)) and message
                 or isinstance(error, MemoryError) and message.startswith("out of memory"))
        kind = "rejected" if clear else "bad"
        print(f"outcome: {kind}: {type(error).__name__}: {message or '(empty message)'}", flush=True)
        return None
    signal.alarm(0)
    nan = nan_arrays(result) if ordinary else []
    print(f"outcome: bad: NaN in {', '.join(nan)} of finite inputs" if nan else "outcome: ok", flush=True)
    return result


def run_grid(name):
    for first in GRID_SHAPES:
        for second in GRID_SHAPES:
            for dtype in GRID_DTYPES:
                a, b = np.ones(first, dtype), np.ones(second, dtype)
                description = (f"{GRID_CALLS[name]} with a = np.ones({first}, np.{dtype}), "
                               f"b = np.ones({second}, np.{dtype})")
                make_call(description, True, eval, GRID_CALLS[name], {"nystrom": nystrom, "a": a, "b": b})


@dataclass
class Argument:
    """A random array argument: its value, its description, the shape and dtype it was made with, and whether it is
    ordinary (finite entries of magnitude about 1 at most)."""

    value: object
    description: str
    shape: tuple
    dtype: np.dtype
    ordinary: bool


class RandomCalls:
    """The calls of one seed: random functions of random arrays and options, valid or not."""

    def __init__(self, seed):
        self.seed = seed
        self.rng = random.Random(seed)
        self.numbers = np.random.default_rng(seed)

    def pick(self, *values):
        return self.rng.choice(values)

    def chance(self, probability):
        return self.rng.random() < probability

    def array(self, shape=None, dtype=None):
        """Standard normal entries times a random scale, at times with an infinite or NaN entry, equal tokens or
        zeros, in a random dtype and layout (C or Fortran order, reversed rows, strided columns, a broadcast row,
        nested lists)."""
        if shape is None:
            n = self.pick(0, 1, 2, 3, 5, 16, 17, 33, 40, 64, 64, 100, 100)
            d = self.pick(0, 1, 2, 3, 8, 8, 16, 19)
            shape = self.pick(*[(n, d)] * 8, (2, n, d), (2, 3, n, d), (n,), ())
        dtype = np.dtype(dtype or self.pick(*[np.float32, np.float64] * 8, np.float16, np.int32, np.bool_,
                                            np.complex64, object))
        scale = self.pick(0.0, 1e-30, 1.0, 1.0, 1.0, 10.0, 100.0, 1e4)
        values = np.asarray(scale * self.numbers.standard_normal(shape))
        notes = [f"scale {scale:g}"]
        ordinary = scale <= 1
        content = self.rng.random()
        if values.size and content < 0.1:
            index, special = self.rng.randrange(values.size), self.pick(math.nan, math.inf, -math.inf)
            values.flat[index] = special
            notes.append(f"{special} at flat index {index}")
            ordinary = False
        elif values.ndim >= 2 and values.size and content < 0.2:
            values[..., :, :] = values[..., :1, :]
            notes.append("equal tokens")
        elif values.size and content < 0.25:
            values.fill(0)
            notes.append("zeros")
        with np.errstate(invalid="ignore", over="ignore"):
            values = values.astype(dtype)
        layout = self.rng.random()
        if values.ndim >= 2 and layout < 0.15:
            values = np.asfortranarray(values)
            notes.append("Fortran order")
        elif values.ndim >= 2 and layout < 0.25:
            values = values[..., ::-1, :]
            notes.append("reversed rows")
        elif values.ndim >= 2 and layout < 0.3:
            values = np.repeat(values, 2, axis=-1)[..., ::2]
            notes.append("every other column of a wider array")
        elif values.ndim >= 2 and values.shape[-2] and layout < 0.35:
            values = np.broadcast_to(values[..., :1, :], values.shape)
            notes.append("first row broadcast")
        elif dtype != object and layout < 0.38:
            values = values.tolist()
            notes.append("nested lists")
        return Argument(values, f"{dtype.name} {shape} ({', '.join(notes)})", shape, dtype, ordinary)

    def out_array(self, q, v):
        """An `out` for attention(q, k, v): mostly an array of the output's shape and q's dtype (at times read-only
        or Fortran-ordered), else q itself (overlapping it) or any random array."""
        shape = (*q.shape[:-1], v.shape[-1]) if len(q.shape) >= 2 and len(v.shape) >= 2 else (3, 4)
        dtype = q.dtype if q.dtype.kind == "f" else np.dtype(np.float64)
        kind = self.pick("fresh", "fresh", "fresh", "read-only", "Fortran order", "q itself", "random")
        if kind == "random":
            return self.array()
        if kind == "q itself":
            return Argument(q.value, "q itself", q.shape, q.dtype, q.ordinary)
        values = np.full(shape, np.nan, dtype)
        if kind == "read-only":
            values.flags.writeable = False
        elif kind == "Fortran order":
            values = np.asfortranarray(values)
        return Argument(values, f"{kind} {dtype.name} {shape}", shape, dtype, True)

    def qkv(self):
        """q, k, v of matching shapes mostly (k q itself at times), of unrelated random shapes else."""
        q = self.array()
        if self.chance(0.05):
            return q, self.array(), self.array()
        dtype = None if q.dtype == object else q.dtype
        k = q if self.chance(0.07) else self.array(q.shape, dtype)
        v = self.array(q.shape[:-1] + (self.pick(0, 1, 4, 7),) if q.shape else (), dtype)
        return q, k, v

    def options(self, names):
        """Each of the named options at times (OPTIONS), and whether all are ordinary values."""
        options, ordinary = {}, True
        for name in names:
            probability, values, extremes = OPTIONS[name]
            if self.chance(probability):
                choice = self.rng.randrange(len(values) + len(extremes))
                options[name] = (*values, *extremes)[choice]
                ordinary = ordinary and choice < len(values)
        return options, ordinary

    def arguments(self, name):
        """Random arguments and options for the function `name`: q, k and v, or other random arrays."""
        q, k, v = self.qkv()
        if name == "approximate":
            return (q, k, v), self.options(OUTPUT_OPTIONS)
        if name == "attention":
            options, ordinary = self.options(OUTPUT_OPTIONS)
            if self.chance(0.3):
                options["out"] = self.out_array(q, v)
            return (q, k, v), (options, ordinary)
        if name == "time_attention":
            return (q, k, v), self.options((*OUTPUT_OPTIONS, "repeat"))
        if name == "evaluate":
            return ((q, k, *self.pick((v,), (v, self.array()), ())),
                    self.options((*OUTPUT_OPTIONS, *SPECTRAL_OPTIONS, "matrix_free", "memory", "dense_svd_limit")))
        if name == "nystrom_factors":
            return (q, k), self.options(FACTORS_OPTIONS)
        if name == "select_landmarks":
            return (q, k), self.options(SELECTION_OPTIONS)
        if name == "pseudoinverse":
            n = self.pick(0, 1, 2, 5, 16)
            shape = self.pick((n, n), (n, n), (n, self.pick(0, 1, 2, 5, 16)), None)
            return (self.array(shape),), self.options(PINV_OPTIONS)
        if name in ("attention_matrix", "kernel_matrix"):
            return (q, k), self.options(KERNEL_OPTIONS)
        if name == "kernel_norm":
            return (q, k), self.options((*KERNEL_OPTIONS, "solver", *SPECTRAL_OPTIONS))
        if name == "kernel_singular_values":
            return ((q, k, self.pick(-1, 0, 1, 3, 100)),
                    self.options((*KERNEL_OPTIONS, *SPECTRAL_OPTIONS, "augmented")))
        if name == "top_singular_values":
            return ((self.array(), self.pick(-1, 0, 1, 3, 100)),
                    self.options(("subspace", "max_restarts", "spectral_tolerance", "augmented")))
        if name in ("singular_values", "safe_alpha"):
            return (self.array(),), ({}, True)
        if name == "output_errors":
            return (q, self.pick(q, k, v)), ({}, True)
        if name == "theorem3_constant":
            if self.chance(0.3):
                return (self.array(), self.array(), self.array()), ({}, True)
            n, m, dtype = self.pick(0, 1, 5, 40), self.pick(0, 1, 2, 5), self.pick(np.float32, np.float64)
            return (self.array((n, m), dtype), self.array((m, m), dtype), self.array((m, n), dtype)), ({}, True)
        values = self.array(self.pick((self.pick(0, 1, 5, 16),), None), np.float64)
        if name == "numerical_rank":
            return (values, *self.pick((), (), (-1.0,), (0.0,), (0.5,), (math.nan,))), ({}, True)
        return (values, self.pick(-1, 0, 1, 3, 100)), ({}, True)  # energy_fraction

    def factors_arguments(self, name, index):
        """error_norm, landmark_terms or error_singular_values: q, k and factors (mostly those of q and k, made by
        nystrom_factors first; None when it rejected them), options, and whether the factors are of ordinary ones."""
        q, k, _ = self.qkv()
        factors, ordinary = None, True
        if self.chance(0.9):
            options, ordinary = self.options([option for option in FACTORS_OPTIONS if option != "method"])
            options["method"] = self.pick("pnp-nystra", "symmetric-nystrom")  # the methods with factors
            ordinary = ordinary and q.ordinary and k.ordinary
            factors = make_call(self.describe(index, "nystrom_factors", (q, k), options), ordinary,
                                nystrom.nystrom_factors, q.value, k.value, **options)
            if factors is None:
                return None
        if self.chance(0.1):
            q, k = self.array(), self.array()
        count = (self.pick(-1, 0, 1, 3, 1000),) if name == "error_singular_values" else ()
        solver = ("solver",) if name == "error_norm" else ()
        options, ordinary_options = self.options((*solver, "subspace", "panel_rows"))
        return (q, k, factors, *count), (options, ordinary and ordinary_options)

    def call(self, index):
        """One random call; two for the functions of factors, nystrom_factors first."""
        name = self.pick(*RANDOM_FUNCTIONS)
        if name in ("error_norm", "landmark_terms", "error_singular_values"):
            made = self.factors_arguments(name, index)
            if made is None:
                return
            arguments, (options, ordinary) = made
        else:
            arguments, (options, ordinary) = self.arguments(name)
        ordinary = ordinary and all(a.ordinary for a in arguments if isinstance(a, Argument))
        make_call(self.describe(index, name, arguments, options), ordinary, getattr(nystrom, name),
                  *[a.value if isinstance(a, Argument) else a for a in arguments],
                  **{key: value.value if isinstance(value, Argument) else value for key, value in options.items()})

    def describe(self, index, name, arguments, options):
        words = [a.description if isinstance(a, Argument) else "the factors just made"
                 if isinstance(a, nystrom.NystromFactors) else repr(a) for a in arguments]
        shown = {key: value.description if isinstance(value, Argument) else value for key, value in options.items()}
        return f"seed {self.seed} call {index}: nystrom.{name}({', '.join(words)}, **{shown})"


def run_random(seed, count):
    calls = RandomCalls(seed)
    for index in range(count):
        calls.call(index)


# ---------------------------------------------------------------------------------------------------------------
# the tests: one worker each

def run_worker(*arguments):
    """This file run as a worker: its calls as [description, outcome] pairs. Fails naming the call it was making
    when the worker crashed or hung."""
    command = [sys.executable, __file__, *arguments]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=WORKER_SECONDS)
    calls = []
    for line in completed.stdout.splitlines():
        if line.startswith("call: "):
            calls.append([line.removeprefix("call: "), None])
        elif line.startswith("outcome: "):
            calls[-1][1] = line.removeprefix("outcome: ")
    if completed.returncode:
        if completed.returncode == -signal.SIGALRM:
            reason = f"was killed after a call ran over {CALL_SECONDS} s"
        elif completed.returncode < 0:
            reason = f"was killed by {signal.Signals(-completed.returncode).name}"
        else:
            reason = f"exited with status {completed.returncode}"
        during = (f"during {calls[-1][0]}" if calls and calls[-1][1] is None
                  else f"after {calls[-1][0]}" if calls else "before its first call")
        pytest.fail(f"`{' '.join(command)}` {reason} {during}\n{completed.stderr[-3000:]}", pytrace=False)
    return calls


def fail_on_bad_calls(calls):
    """Fails listing the calls (the first ten) that neither returned nor raised a clear error (make_call)."""
    bad = [f"{description}\n    -> {outcome}" for description, outcome in calls
           if not outcome.startswith(("ok", "rejected: "))]
    if bad:
        pytest.fail(f"{len(bad)} of {len(calls)} calls went wrong:\n" + "\n".join(bad[:10]), pytrace=False)


@pytest.mark.parametrize("seed", RANDOM_SEEDS)
def test_random_calls_return_or_raise_value_or_type_errors(seed):
    calls = run_worker("random", str(seed), str(RANDOM_CALLS))
    assert len(calls) >= RANDOM_CALLS
    fail_on_bad_calls(calls)
    # The fuzzing reaches the computations: neither (nearly) every call rejected nor every one accepted.
    outcomes = Counter(outcome.split(":")[0] for _, outcome in calls)
    assert outcomes["ok"] >= 0.1 * len(calls) and outcomes["rejected"] >= 0.5 * len(calls), outcomes


@pytest.mark.parametrize("name", GRID_CALLS)
def test_small_and_empty_shapes_return_or_raise_value_or_type_errors(name):
    calls = run_worker("grid", name)
    assert len(calls) == len(GRID_SHAPES) ** 2 * len(GRID_DTYPES)
    fail_on_bad_calls(calls)


if __name__ == "__main__":
    signal.signal(signal.SIGALRM, signal.SIG_DFL)  # the alarm of a hanging call ends the worker
    if sys.argv[1] == "random":
        run_random(int(sys.argv[2]), int(sys.argv[3]))
    else:
        run_grid(sys.argv[2])
