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

Arrays: float32 or float64 (results keep the dtype), any layout (Fortran-ordered arrays are read without a copy),
numpy arrays (big-endian ones copied to native order), nested lists of floats (as float64) or CPU torch tensors.
Keyword arguments are named as on the command line (`nystrom sweep --help`; `lambda_` for --lambda). Bad input
raises ValueError naming the value, sizes too large to allocate MemoryError; numerical outcomes (a diverged
pseudoinverse) are statuses. Every computation releases the GIL; `set_threads` sets its OpenMP threads.
`attention(..., out=array)` writes into an array reused across calls.
`nystrom.torch` (imported on its own) adapts torch models for inference.
"""

import functools
import re

import numpy as np

from ._nystrom import (
    KERNELS,
    METHODS,
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
# ... and the methods that take arrays.
NystromFactors.apply = _taking_array_likes(NystromFactors.apply)
NystromFactors.attention = _taking_array_likes(NystromFactors.attention)

__all__ = [
    "KERNELS", "METHODS", "PINV_METHODS", "STABILIZATIONS", "STRATEGIES", "Approximation",
    "BoundReport", "Landmarks", "LandmarkTerms", "NystromFactors", "OutputErrors", "PinvResult", "SpectralResult",
    "approximate", "attention", "attention_matrix", "blas_core", "energy_fraction",
    "error_norm", "error_singular_values", "evaluate", "evaluate_bounds", "kernel_matrix", "kernel_norm",
    "kernel_singular_values", "landmark_terms", "numerical_rank", "nystrom_factors", "output_errors",
    "pseudoinverse", "read_bench", "read_results", "read_spectra", "read_vision", "safe_alpha", "select_landmarks",
    "set_threads", "singular_values", "theorem3_constant", "threads", "time_attention", "top_singular_values",
]
