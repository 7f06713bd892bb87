"""nystrom: low-rank approximations of softmax attention and their errors, on numpy arrays and torch tensors.

The C++ library in-process (the compiled extension nystrom._nystrom): kernels, landmarks, pseudoinverses, the
generalized Nyström factors of PnP-Nystra, the attention output of every method the papers compare (exact,
pnp-nystra, nystromformer, cur, symmetric-nystrom, performer, linformer), spectral errors (dense, Lanczos,
matrix-free), the Lemma 2.1 terms and bounds, and the reader of `nystrom sweep` results.

    import numpy as np, nystrom
    q, k, v = (np.random.default_rng(0).standard_normal((1024, 64), dtype=np.float32) for _ in range(3))
    out = nystrom.attention(q, k, v, method="pnp-nystra", landmarks=16, pinv="razavi", pinv_iters=6)
    exact = nystrom.attention(q, k, v, method="exact")
    print(nystrom.output_errors(exact, out).relative_frobenius)

Arrays: float32 or float64 (results keep the dtype; float16 and bfloat16 arrays are computed with
`precision="half"` or `"bfloat16"`, the format emulated in float32 as docs/mathematics.md §8 says), any layout (Fortran-ordered arrays are read without a copy),
numpy arrays (big-endian ones copied to native order), nested lists of floats (as float64) or CPU torch tensors.
Keyword arguments are named as on the command line (`nystrom sweep --help`; `lambda_` for --lambda). Bad input
raises ValueError naming the value, sizes too large to allocate MemoryError; numerical outcomes (a diverged
pseudoinverse) are statuses. Every computation releases the GIL; `set_threads` sets its OpenMP threads.
`attention(..., out=array)` writes into an array reused across calls.
`nystrom.torch` (imported on its own) adapts torch models for inference. The approximations are also objects in
scikit-learn's style, fitted on q and k and applied to values (nystrom.estimators: PnPNystra, SymmetricNystrom,
Nystromformer, Cur, Performer, Linformer).
"""

import functools
import os
import re


def _supported_blas_core():
    """The best OpenBLAS core the CPU runs, from the flags of /proc/cpuinfo, as the `nystrom` program picks it:
    'SkylakeX' with AVX-512 F, CD, BW, DQ and VL, 'Haswell' with AVX2 and FMA, else None (OpenBLAS's own choice;
    Debian 12's OpenBLAS falls back to its slow Prescott kernels on CPUs newer than it knows)."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            flags = next((line.split(":", 1)[1].split() for line in cpuinfo if line.startswith("flags")), [])
    except OSError:
        return None
    if {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"} <= set(flags):
        return "SkylakeX"
    return "Haswell" if {"avx2", "fma"} <= set(flags) else None


# OpenBLAS reads OPENBLAS_CORETYPE when the extension loads it; a value already set is kept.
if "OPENBLAS_CORETYPE" not in os.environ and (_core := _supported_blas_core()):
    os.environ["OPENBLAS_CORETYPE"] = _core
    del _core

import numpy as np  # noqa: E402

from ._nystrom import (
    KERNELS,
    METHODS,
    PARAMETERS,
    PINV_METHODS,
    STABILIZATIONS,
    STRATEGIES,
    Approximation,
    BoundReport,
    Landmarks,
    LandmarkTerms,
    NystromFactors,
    OutputErrors,
    PinvResult,
    SpectralResult,
    approximate,
    attention,
    attention_matrix,
    blas_core,
    energy_fraction,
    error_norm,
    error_singular_values,
    evaluate,
    evaluate_bounds,
    kernel_matrix,
    kernel_norm,
    kernel_singular_values,
    landmark_terms,
    numerical_rank,
    nystrom_factors,
    output_errors,
    pseudoinverse,
    safe_alpha,
    select_landmarks,
    set_threads,
    singular_values,
    theorem3_constant,
    threads,
    time_attention,
    top_singular_values,
)
from .results import read_bench, read_results, read_spectra, read_vision


def _native(value, name):
    """`value` as the extension takes it: a list or tuple of numbers (numpy.typing.ArrayLike) as a numpy array, a
    numpy array of another byte order (big-endian arrays, as h5py reads '>f4' datasets) copied to native order, a
    torch tensor with its lazy negation resolved (the negative bit of `c.conj().imag`, which DLPack exports as the
    memory without the sign). The extension takes arrays through DLPack, which has none of them. Raises ValueError
    naming the argument `name` for ragged lists and for dtypes DLPack cannot carry (object, text, long double),
    which the extension would refuse only as arguments of no supported type."""
    if isinstance(value, (list, tuple)):
        try:
            value = np.asarray(value)
        except ValueError as error:
            raise ValueError(f"{name} is not an array of numbers: {error}") from None
    if isinstance(value, np.ndarray) and (value.dtype.kind not in "biufc" or value.dtype.itemsize > 16
                                          or value.dtype.kind == "f" and value.dtype.itemsize > 8):
        raise ValueError(f"{name} has dtype {value.dtype}; expected float32 or float64")
    if isinstance(value, np.ndarray) and not value.dtype.isnative:
        return value.astype(value.dtype.newbyteorder("="))
    if callable(getattr(value, "is_neg", None)) and value.is_neg():
        return value.resolve_neg()
    return value


def _taking_array_likes(function):
    """`function` taking its arrays as any numpy.typing.ArrayLike of float32 or float64 values (_native): the
    positional arguments, and the keyword arguments its signature declares as arrays (the others, such as `forced`
    or `window`, are sequences of integers)."""
    signature = function.__doc__.split("\n", 1)[0]
    arrays = frozenset(re.findall(r"(\w+): numpy\.(?:typing\.ArrayLike|ndarray)", signature))
    # The positional parameters by name (`self` of a method has no annotation).
    names = ["self"] * signature.startswith(f"{function.__name__}(self") + re.findall(r"(\w+): ", signature)

    @functools.wraps(function)
    def call(*args, **kwargs):
        return function(*(_native(value, name) if name in arrays else value for value, name in zip(args, names)),
                        *args[len(names):],
                        **{key: _native(value, key) if key in arrays else value for key, value in kwargs.items()})
    return call


# Every function of the extension that takes arrays.
for _name in ("approximate", "attention", "attention_matrix", "energy_fraction", "error_norm", "error_singular_values",
              "evaluate", "kernel_matrix", "kernel_norm", "kernel_singular_values", "landmark_terms", "numerical_rank",
              "nystrom_factors", "output_errors", "pseudoinverse", "safe_alpha", "select_landmarks", "singular_values",
              "theorem3_constant", "time_attention", "top_singular_values"):
    globals()[_name] = _taking_array_likes(globals()[_name])
del _name
# The precision keyword's names of each format: the emulated ones are computed in float32.
_FORMATS = {"half": np.float32, "float16": np.float32, "fp16": np.float32, "bfloat16": np.float32,
            "bf16": np.float32, "float": np.float32, "float32": np.float32, "fp32": np.float32,
            "double": np.float64, "float64": np.float64, "fp64": np.float64}


def _format_of(value):
    """'half' or 'bfloat16' for a float16 or bfloat16 array or tensor, None for any other value."""
    dtype = str(getattr(value, "dtype", ""))
    return "bfloat16" if dtype.endswith("bfloat16") else "half" if dtype.endswith("float16") else None


def _dtype_name(value):
    """The dtype of an array or tensor as numpy names it ('float16', 'bfloat16', 'float32', ...)."""
    return str(getattr(value, "dtype", type(value).__name__)).removeprefix("torch.")


def _as_dtype(value, dtype):
    """`value` converted to the numpy dtype `dtype` (a torch tensor stays one)."""
    if type(value).__module__.startswith("torch"):
        import torch
        return value.to({np.float32: torch.float32, np.float64: torch.float64}[dtype])
    return np.asarray(value, dtype=dtype)


def _in_precision(function):
    """`function` (q, k, v first) taking the keyword `precision` as a format to compute in: float16 and bfloat16
    arrays set it where it is not given; for a named format the arrays are converted to the type it is computed
    in (float32 for half, bfloat16 and float, float64 for double), and an array result is returned in q's dtype
    (for bfloat16 tensors as a torch tensor)."""
    @functools.wraps(function)
    def call(*args, **kwargs):
        arrays = [value for value in args[:3] if value is not None]
        formats = {_format_of(value) for value in arrays}
        if formats - {None} and len(formats) > 1:
            names = ", ".join(f"{name} is {_dtype_name(value)}" for name, value in zip(("q", "k", "v"), arrays))
            raise ValueError(f"{function.__name__}: {names}; pass arrays of one dtype")
        if kwargs.get("precision") is None and formats - {None}:
            kwargs["precision"] = formats.pop()
        dtype = _FORMATS.get(str(kwargs.get("precision")).lower())
        if dtype is None:
            return function(*args, **kwargs)
        result = function(*(_as_dtype(value, dtype) if index < 3 and value is not None else value
                            for index, value in enumerate(args)), **kwargs)
        return _in_dtype_of(result, args[0]) if isinstance(result, np.ndarray) else result
    return call


def _in_dtype_of(result, q):
    """The numpy array `result` in q's dtype; a torch tensor for bfloat16, which numpy does not have."""
    if not type(q).__module__.startswith("torch"):
        return result.astype(np.asarray(q).dtype, copy=False)
    import torch
    if q.dtype == torch.bfloat16:
        return torch.from_numpy(result).to(torch.bfloat16)
    return result.astype(str(q.dtype).removeprefix("torch."), copy=False)


for _name in ("approximate", "attention", "evaluate", "time_attention"):
    globals()[_name] = _in_precision(globals()[_name])
del _name
# ... and the methods that take arrays.
NystromFactors.apply = _taking_array_likes(NystromFactors.apply)
NystromFactors.attention = _taking_array_likes(NystromFactors.attention)

# The approximations as objects (after the wrapping above: they call the wrapped functions).
from .estimators import Cur, Linformer, NotFittedError, Nystromformer, Performer, PnPNystra, SymmetricNystrom

__all__ = [
    "KERNELS", "METHODS", "PARAMETERS", "PINV_METHODS", "STABILIZATIONS", "STRATEGIES", "Approximation",
    "BoundReport", "Landmarks", "LandmarkTerms", "NystromFactors", "OutputErrors", "PinvResult", "SpectralResult",
    "Cur", "Linformer", "NotFittedError", "Nystromformer", "Performer", "PnPNystra", "SymmetricNystrom",
    "approximate", "attention", "attention_matrix", "blas_core", "energy_fraction",
    "error_norm", "error_singular_values", "evaluate", "evaluate_bounds", "kernel_matrix", "kernel_norm",
    "kernel_singular_values", "landmark_terms", "numerical_rank", "nystrom_factors", "output_errors",
    "pseudoinverse", "read_bench", "read_results", "read_spectra", "read_vision", "safe_alpha", "select_landmarks",
    "set_threads", "singular_values", "theorem3_constant", "threads", "time_attention", "top_singular_values",
]
