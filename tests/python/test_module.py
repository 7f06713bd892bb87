"""Tests of the Python module `nystrom` (python/, installed by scripts/setup-python.sh): every function against
straightforward numpy references on small sizes in float32 and float64, dtypes kept, array layouts and batches,
bad arguments (ValueError naming the value), the GIL released and calls from two threads at once. The comparison
with the `nystrom` program on the same inputs is test_module_program.py; the torch adapters test_module_torch.py."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import nystrom

REPOSITORY = Path(__file__).resolve().parents[2]
DTYPES = (np.float32, np.float64)
# Relative Frobenius tolerance of a result against a float64 numpy reference: rounding of the library's scalar
# type, with headroom for the condition of the small pseudoinverses involved.
TOLERANCE = {np.float32: 3e-4, np.float64: 1e-10}


# ---------------------------------------------------------------------------------------------------------------
# numpy references (docs/mathematics.md)

def tokens(n, d, dtype=np.float64, seed=0, scale=1.0):
    return (scale * np.random.default_rng(seed).standard_normal((n, d))).astype(dtype)


def qkv(n=48, d=8, dv=6, dtype=np.float64, seed=0, scale=1.0):
    return tokens(n, d, dtype, seed, scale), tokens(n, d, dtype, seed + 1, scale), tokens(n, dv, dtype, seed + 2)


def relative(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return np.linalg.norm(a - b) / np.linalg.norm(b)


def kernel_ref(x, y, kernel="exp", scale=None, lambda_=4.0, bandwidth=8.0):
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if kernel == "exp":
        return np.exp((1 / np.sqrt(x.shape[1]) if scale is None else scale) * x @ y.T)
    difference = x[:, None, :] - y[None, :, :]
    if kernel == "laplacian":
        return np.exp(-np.abs(difference).sum(-1) / lambda_)
    return np.exp(-(difference**2).sum(-1) / (2 * bandwidth**2))


def softmax_ref(logits):
    shifted = np.exp(logits - logits.max(axis=1, keepdims=True))
    return shifted / shifted.sum(axis=1, keepdims=True)


def normalized_output(g_hat, v, epsilon=0.0):
    return (g_hat @ np.asarray(v, dtype=float)) / (g_hat.sum(axis=1, keepdims=True) + epsilon)


def segment_means_ref(x, m):
    n = len(x)
    s = n // m
    lengths = [s] * ((s + 1) * m - n) + [s + 1] * (m - ((s + 1) * m - n))
    bounds = np.cumsum([0] + lengths)
    return np.stack([np.asarray(x[a:b], dtype=float).mean(axis=0) for a, b in zip(bounds[:-1], bounds[1:])])


def safe_alpha_ref(a):
    return 1 / (np.abs(a).sum(axis=0).max() * np.abs(a).sum(axis=1).max())


def razavi_ref(a, iterations):
    a = np.asarray(a, dtype=float)
    eye = np.eye(len(a))
    z = safe_alpha_ref(a) * a.T
    for _ in range(iterations):
        az = a @ z
        z = 0.25 * z @ (13 * eye - az @ (15 * eye - az @ (7 * eye - az)))
    return z


def newton_schulz_ref(a, iterations):
    a = np.asarray(a, dtype=float)
    z = safe_alpha_ref(a) * a.T
    for _ in range(iterations):
        z = z @ (2 * np.eye(len(a)) - a @ z)
    return z


def step_indices(n, m):
    return [r * (n // m) for r in range(m)]


# ---------------------------------------------------------------------------------------------------------------
# kernels and attention matrices

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel, parameters", [("exp", {}), ("exp", {"scale": 0.3}), ("laplacian", {"lambda_": 2.0}),
                                                ("gaussian", {"bandwidth": 3.0})])
def test_kernel_matrix_matches_its_formula(dtype, kernel, parameters):
    x, y = tokens(20, 5, dtype, 1), tokens(13, 5, dtype, 2)
    g = nystrom.kernel_matrix(x, y, kernel=kernel, **parameters)
    assert g.dtype == dtype and g.shape == (20, 13)
    assert relative(g, kernel_ref(x, y, kernel, **parameters)) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_matrix_is_the_row_softmax(dtype):
    q, k = tokens(30, 6, dtype, 3, scale=3.0), tokens(30, 6, dtype, 4, scale=3.0)
    s = nystrom.attention_matrix(q, k)
    assert s.dtype == dtype
    reference = softmax_ref(q.astype(float) @ k.astype(float).T / np.sqrt(6))
    assert relative(s, reference) < TOLERANCE[dtype]
    np.testing.assert_allclose(s.sum(axis=1), 1, rtol=10 * np.finfo(dtype).eps * 30)


# ---------------------------------------------------------------------------------------------------------------
# landmarks

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n, m", [(48, 8), (50, 8), (7, 7), (9, 1)])
def test_segment_means_are_uneven_contiguous_means(dtype, n, m):
    q, k = tokens(n, 4, dtype, 5), tokens(n, 4, dtype, 6)
    marks = nystrom.select_landmarks(q, k, landmarks=m, strategy="segment-means")
    assert marks.q.dtype == dtype and marks.q.shape == (m, 4)
    assert relative(marks.q, segment_means_ref(q, m)) < TOLERANCE[dtype]
    assert relative(marks.k, segment_means_ref(k, m)) < TOLERANCE[dtype]
    assert marks.q_indices.size == 0 and marks.k_indices.size == 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_window_pool_averages_blocks_of_the_token_grid(dtype):
    q, k = tokens(64, 3, dtype, 7), tokens(64, 3, dtype, 8)
    marks = nystrom.select_landmarks(q, k, landmarks=4, strategy="window-pool", window=(8, 8))
    grid = q.astype(float).reshape(8, 8, 3)
    reference = np.stack([grid[4 * i:4 * i + 4, 4 * j:4 * j + 4].mean(axis=(0, 1)) for i in range(2) for j in range(2)])
    assert relative(marks.q, reference) < TOLERANCE[dtype]


def pooled(grid, rows, cols):
    """Means of the rows x cols blocks of an h x w x d token grid (h, w divisible), row-major."""
    h, w = grid.shape[0] // rows, grid.shape[1] // cols
    return np.stack([grid[h * i:h * (i + 1), w * j:w * (j + 1)].mean(axis=(0, 1))
                     for i in range(rows) for j in range(cols)])


@pytest.mark.parametrize("dtype", DTYPES)
def test_window_grid_and_prefix_tokens(dtype):
    q, k = tokens(256, 3, dtype, 9), tokens(256, 3, dtype, 10)
    grid = q.astype(float).reshape(8, 32, 3)
    aspect = nystrom.select_landmarks(q, k, landmarks=16, strategy="window-pool", window=(8, 32))
    square = nystrom.select_landmarks(q, k, landmarks=16, strategy="window-pool", window=(8, 32), window_grid="square")
    assert relative(aspect.q, pooled(grid, 2, 8)) < TOLERANCE[dtype]  # m = 16 on 8 x 32: aspect 2 x 8
    assert relative(square.q, pooled(grid, 4, 4)) < TOLERANCE[dtype]
    # A CLS token before an 8 x 8 window: a landmark of its own, then 2 x 2 pooling of the 64 patches.
    q, k = tokens(65, 3, dtype, 11), tokens(65, 3, dtype, 12)
    marks = nystrom.select_landmarks(q, k, landmarks=5, strategy="window-pool", window=(8, 8), prefix_tokens=1)
    reference = np.vstack([q[:1].astype(float), pooled(q[1:].astype(float).reshape(8, 8, 3), 2, 2)])
    assert relative(marks.q, reference) < TOLERANCE[dtype]
    with pytest.raises(ValueError, match="window_grid|grid"):
        nystrom.select_landmarks(q, k, landmarks=5, window_grid="round")


@pytest.mark.parametrize("dtype", DTYPES)
def test_clamp_threshold(dtype):
    q, k, _ = qkv(n=48, dtype=dtype, scale=2.0)
    factors = {c: nystrom.nystrom_factors(q, k, landmarks=6, stabilization="clamped", clamp_threshold=c).dense()
               for c in (0.0, 5.0, 1e6)}
    plain = nystrom.nystrom_factors(q, k, landmarks=6, stabilization="none").dense()
    # Above every logit the clamped exponential is exp itself (the same factors up to rounding); at 0 and 5 not.
    assert relative(factors[1e6], plain) < TOLERANCE[dtype]
    assert relative(factors[0.0], plain) > 1e-2 and relative(factors[0.0], factors[5.0]) > 1e-3


@pytest.mark.parametrize("dtype", DTYPES)
def test_selection_strategies_return_rows_and_their_indices(dtype):
    q, k = tokens(40, 5, dtype, 9), tokens(40, 5, dtype, 10)
    step = nystrom.select_landmarks(q, k, landmarks=8, strategy="step")
    assert step.q_indices.tolist() == step_indices(40, 8) and step.q_indices.dtype == np.int64
    top = nystrom.select_landmarks(q, k, landmarks=5, strategy="top-sum")
    assert sorted(top.q_indices.tolist()) == sorted(np.argsort(-q.astype(float).sum(axis=1))[:5].tolist())
    embed = nystrom.select_landmarks(q, k, landmarks=5, strategy="top-embed", embed_column=2)
    assert sorted(embed.q_indices.tolist()) == sorted(np.argsort(-q[:, 2].astype(float))[:5].tolist())
    different = nystrom.select_landmarks(q, k, landmarks=5, strategy="top-abs", different_indices=True)
    assert sorted(different.k_indices.tolist()) == sorted(np.argsort(-np.abs(k.astype(float)).sum(axis=1))[:5].tolist())
    forced = nystrom.select_landmarks(q, k, landmarks=6, strategy="random", seed=3, forced=[0, 39])
    assert {0, 39} <= set(forced.q_indices.tolist()) and len(set(forced.q_indices.tolist())) == 6
    again = nystrom.select_landmarks(q, k, landmarks=6, strategy="random", seed=3, forced=[0, 39])
    assert forced.q_indices.tolist() == again.q_indices.tolist()
    given = nystrom.select_landmarks(q, k, landmarks=3, strategy="given", q_indices=[4, 1, 30], k_indices=[2, 3, 5])
    for marks in (step, top, embed, different, forced, given):
        np.testing.assert_array_equal(marks.q, q[marks.q_indices])
        np.testing.assert_array_equal(marks.k, k[marks.k_indices])


@pytest.mark.parametrize("dtype", DTYPES)
def test_kmeans_centroids_are_deterministic_means(dtype):
    # Four well-separated clusters: k-means with 4 centroids finds their means.
    centers = np.array([[10.0, 0], [-10, 0], [0, 10], [0, -10]])
    x = (np.repeat(centers, 10, axis=0) + 0.1 * tokens(40, 2, np.float64, 11)).astype(dtype)
    marks = nystrom.select_landmarks(x, x, landmarks=4, strategy="kmeans", seed=1)
    found = sorted(map(tuple, np.round(marks.q.astype(float), 0)))
    expected = sorted(map(tuple, np.round(x.astype(float).reshape(4, 10, 2).mean(axis=1), 0)))
    assert found == expected
    np.testing.assert_array_equal(marks.q, nystrom.select_landmarks(x, x, landmarks=4, strategy="kmeans", seed=1).q)


# ---------------------------------------------------------------------------------------------------------------
# pseudoinverses

@pytest.mark.parametrize("dtype", DTYPES)
def test_exact_pseudoinverse_matches_numpy(dtype):
    a = tokens(6, 6, dtype, 12) + 3 * np.eye(6, dtype=dtype)
    result = nystrom.pseudoinverse(a)
    assert result.z.dtype == dtype and result.status == "converged" and result.rank == 6
    assert relative(result.z, np.linalg.pinv(a.astype(float))) < 10 * TOLERANCE[dtype]
    singular = np.outer(np.arange(1.0, 5.0), np.arange(2.0, 6.0)).astype(dtype)  # rank 1
    assert nystrom.pseudoinverse(singular).rank == 1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method, iterations, reference",
                         [("razavi", 4, razavi_ref), ("newton-schulz", 6, newton_schulz_ref)])
def test_iterative_pseudoinverses_follow_their_iteration(dtype, method, iterations, reference):
    a = tokens(5, 5, dtype, 13) + 4 * np.eye(5, dtype=dtype)
    result = nystrom.pseudoinverse(a, pinv=method, pinv_iters=iterations)
    assert result.iterations == iterations and result.status in ("completed", "converged")
    assert result.alpha == pytest.approx(safe_alpha_ref(a.astype(float)), rel=1e-6)
    assert relative(result.z, reference(a, iterations)) < 10 * TOLERANCE[dtype]
    residuals = [np.linalg.norm(np.eye(5) - a.astype(float) @ reference(a, i)) for i in range(iterations + 1)]
    assert result.residuals.dtype == np.float64 and len(result.residuals) == iterations + 1
    np.testing.assert_allclose(result.residuals, residuals, rtol=1e-3 if dtype == np.float32 else 1e-8, atol=1e-5)
    assert result.residual == result.residuals[-1]
    assert result.seconds > 0
    assert nystrom.safe_alpha(a) == pytest.approx(safe_alpha_ref(a.astype(float)), rel=1e-6)


def test_divergence_is_a_status_not_an_error():
    a = tokens(5, 5, np.float64, 14) + 4 * np.eye(5)
    sigma1 = np.linalg.norm(a, 2)
    result = nystrom.pseudoinverse(a, pinv="newton-schulz", pinv_iters=10, alpha=3 / sigma1**2)
    assert result.status == "diverged"


def test_regularized_pseudoinverses():
    a = tokens(5, 5, np.float64, 15)
    shifted = nystrom.pseudoinverse(a, shift=0.5)
    assert relative(shifted.z, np.linalg.inv(a + 0.5 * np.eye(5))) < 1e-10
    tikhonov = nystrom.pseudoinverse(a, tikhonov=0.1)
    assert relative(tikhonov.z, np.linalg.solve(a.T @ a + 0.1 * np.eye(5), a.T)) < 1e-10


@pytest.mark.parametrize("layout", ("C", "F", "one head"))
def test_a_regularization_beyond_the_dtype_is_refused_by_name(layout):
    # A + εI is formed in the arrays' dtype, where ε = 1e39 is Inf and 1e-50 is 0: LAPACK's or safe_alpha's
    # "non-finite values" blamed the core, and in a batch the error named whichever head came first.
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((3, 2, 64, 8)).astype(np.float32) for _ in range(3))
    if layout == "F":
        q = np.asfortranarray(q)
    if layout == "one head":
        q, k, v = q[0, 0], k[0, 0], v[0, 0]
    for options in ({"tikhonov": 1e39}, {"shift": 1e-50, "pinv": "newton-schulz"},
                    {"shift": 1e308, "method": "nystromformer"}, {"tikhonov": 1e39, "method": "cur"}):
        (name, value), = ((key, value) for key, value in options.items() if key in ("tikhonov", "shift"))
        with pytest.raises(ValueError, match="^" + re.escape(f"pinv: {name} = {value:g} lies beyond float's range")):
            nystrom.attention(q, k, v, landmarks=8, **options)
        # float64 holds each of them
        assert np.isfinite(nystrom.attention(*(x.astype(np.float64) for x in (q, k, v)), landmarks=8,
                                             **options)).all()
    with pytest.raises(ValueError, match=r"^pinv: shift = 1e\+39 lies beyond float's range"):
        nystrom.pseudoinverse(np.eye(4, dtype=np.float32), shift=1e39)


# ---------------------------------------------------------------------------------------------------------------
# Nyström factors and PnP-Nystra

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel", ["exp", "laplacian", "gaussian"])
def test_generalized_nystrom_factors_and_output(dtype, kernel):
    q, k, v = qkv(dtype=dtype)
    factors = nystrom.nystrom_factors(q, k, kernel=kernel, landmarks=6, stabilization="none")
    q_bar, k_bar = segment_means_ref(q, 6), segment_means_ref(k, 6)
    left, core, upper = kernel_ref(q, k_bar, kernel), kernel_ref(q_bar, k_bar, kernel), kernel_ref(q_bar, k, kernel)
    for block, reference in ((factors.left, left), (factors.core, core), (factors.upper, upper)):
        assert block.dtype == dtype and relative(block, reference) < TOLERANCE[dtype]
    g_hat = left @ np.linalg.pinv(core) @ upper
    assert factors.shape == (48, 48)
    assert relative(factors.dense(), g_hat) < 30 * TOLERANCE[dtype]
    x = tokens(48, 1, dtype, 20)[:, 0]
    assert factors.apply(x).dtype == dtype and factors.apply(x).shape == (48,)
    assert relative(factors.apply(x), g_hat @ x) < 30 * TOLERANCE[dtype]
    assert relative(factors.apply(v), g_hat @ v) < 30 * TOLERANCE[dtype]
    # A NaN in x is refused, as attention refuses one in v (apply returned NaN).
    bad = x.copy()
    bad[7] = np.nan
    with pytest.raises(ValueError, match="apply: x"):
        factors.apply(bad)
    out = nystrom.attention(q, k, v, kernel=kernel, landmarks=6, stabilization="none")
    assert out.dtype == dtype and out.shape == (48, 6)
    assert relative(out, normalized_output(g_hat, v)) < 30 * TOLERANCE[dtype]
    # Fortran-ordered arrays take the factors' own column-major code; C-ordered ones the row-major code, whose
    # GEMMs may round differently (amplified by the core's conditioning).
    fortran = nystrom.attention(*(np.asfortranarray(x) for x in (q, k, v)), kernel=kernel, landmarks=6,
                                stabilization="none")
    np.testing.assert_allclose(factors.attention(v), fortran, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-6)
    assert relative(factors.attention(v), out) < 30 * TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_row_max_stabilization_keeps_the_output_and_scales_the_rows(dtype):
    q, k, v = qkv(dtype=dtype, scale=2.0)
    plain = nystrom.attention(q, k, v, landmarks=6, stabilization="none")
    scaled = nystrom.attention(q, k, v, landmarks=6, stabilization="row-max")
    assert relative(scaled, plain) < 30 * TOLERANCE[dtype]
    factors = nystrom.nystrom_factors(q, k, landmarks=6, stabilization="row-max")
    logits = q.astype(float) @ segment_means_ref(k, 6).T / np.sqrt(8)
    assert relative(factors.left_log_scale, logits.max(axis=1)) < TOLERANCE[dtype]
    unscaled = np.exp(factors.left_log_scale)[:, None] * factors.left
    assert relative(unscaled, kernel_ref(q, segment_means_ref(k, 6))) < 10 * TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_clamped_stabilization_is_the_authors_kernel(dtype):
    q, k, v = qkv(dtype=dtype, scale=4.0)  # logits well above 5
    q_bar, k_bar = segment_means_ref(q, 6), segment_means_ref(k, 6)

    def clamped(x, y):
        logits = np.asarray(x, dtype=float) @ np.asarray(y, dtype=float).T / np.sqrt(8)
        return np.exp(np.minimum(logits, 5)) + np.maximum(logits - 5, 0)

    g_hat = clamped(q, k_bar) @ np.linalg.pinv(clamped(q_bar, k_bar)) @ clamped(q_bar, k)
    out = nystrom.attention(q, k, v, landmarks=6, stabilization="clamped")
    assert relative(out, normalized_output(g_hat, v, 1e-12)) < 30 * TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_razavi_pnp_nystra_uses_the_iterated_core(dtype):
    q, k, v = qkv(dtype=dtype)
    q_bar, k_bar = segment_means_ref(q, 6), segment_means_ref(k, 6)
    g_hat = kernel_ref(q, k_bar) @ razavi_ref(kernel_ref(q_bar, k_bar), 3) @ kernel_ref(q_bar, k)
    out = nystrom.attention(q, k, v, landmarks=6, pinv="razavi", pinv_iters=3, stabilization="none")
    assert relative(out, normalized_output(g_hat, v)) < 30 * TOLERANCE[dtype]


# ---------------------------------------------------------------------------------------------------------------
# the other methods

@pytest.mark.parametrize("dtype", DTYPES)
def test_exact_attention(dtype):
    q, k, v = qkv(dtype=dtype, scale=3.0)
    out = nystrom.attention(q, k, v, method="exact")
    reference = softmax_ref(q.astype(float) @ k.astype(float).T / np.sqrt(8)) @ v.astype(float)
    assert out.dtype == dtype and relative(out, reference) < TOLERANCE[dtype]
    laplacian = nystrom.attention(q, k, v, method="exact", kernel="laplacian", lambda_=3.0)
    assert relative(laplacian, normalized_output(kernel_ref(q, k, "laplacian", lambda_=3.0), v)) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_nystromformer(dtype):
    q, k, v = qkv(dtype=dtype)
    q_bar, k_bar = segment_means_ref(q, 6), segment_means_ref(k, 6)
    s = 1 / np.sqrt(8)
    f = softmax_ref(s * q.astype(float) @ k_bar.T)
    a = softmax_ref(s * q_bar @ k_bar.T)
    b = softmax_ref(s * q_bar @ k.astype(float).T)
    reference = f @ razavi_ref(a, 6) @ (b @ v.astype(float))
    out = nystrom.attention(q, k, v, method="nystromformer", landmarks=6)
    assert out.dtype == dtype and relative(out, reference) < 30 * TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("copy_rows", [False, True])
def test_cur(dtype, copy_rows):
    q, k, v = qkv(dtype=dtype)
    index = step_indices(48, 6)
    s = 1 / np.sqrt(8)
    c = softmax_ref(s * q.astype(float) @ k[index].astype(float).T)
    r = softmax_ref(s * q[index].astype(float) @ k.astype(float).T)
    reference = c @ np.linalg.pinv(c[index]) @ (r @ v.astype(float))
    if copy_rows:
        reference[index] = r @ v.astype(float)
    out = nystrom.attention(q, k, v, method="cur", landmarks=6, copy_rows=copy_rows)
    assert out.dtype == dtype and relative(out, reference) < 100 * TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_symmetric_nystrom(dtype):
    q, k, v = qkv(dtype=dtype)
    q_bar, k_bar = segment_means_ref(q, 6), segment_means_ref(k, 6)
    c = kernel_ref(q, k_bar, "laplacian")
    z = newton_schulz_ref(kernel_ref(q_bar, k_bar, "laplacian") + 1e-6 * np.eye(6), 20)
    out = nystrom.attention(q, k, v, method="symmetric-nystrom", kernel="laplacian", landmarks=6)
    assert out.dtype == dtype and relative(out, normalized_output(c @ z @ c.T, v)) < 100 * TOLERANCE[dtype]
    factors = nystrom.nystrom_factors(q, k, method="symmetric-nystrom", kernel="laplacian", landmarks=6)
    assert relative(factors.upper, c.T) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method, size", [("performer", "features"), ("linformer", "projected")])
def test_random_feature_methods_are_their_implied_attention_times_v(dtype, method, size):
    q, k, v = qkv(dtype=dtype)
    approximation = nystrom.approximate(q, k, v, method=method, **{size: 16}, seed=4)
    implied = approximation.implied_attention()
    assert approximation.output.dtype == dtype and implied.dtype == dtype and implied.shape == (48, 48)
    assert relative(approximation.output, implied.astype(float) @ v.astype(float)) < 10 * TOLERANCE[dtype]
    np.testing.assert_array_equal(approximation.output, nystrom.attention(q, k, v, method=method, **{size: 16}, seed=4))
    assert not np.array_equal(approximation.output, nystrom.attention(q, k, v, method=method, **{size: 16}, seed=5))
    if method == "performer":
        np.testing.assert_allclose(implied.sum(axis=1), 1, rtol=1e-4 if dtype == np.float32 else 1e-10)
        exact = nystrom.attention(q, k, v, method="exact")
        few, many = (nystrom.attention(q, k, v, method="performer", features=r, seed=4) for r in (2, 2048))
        assert relative(many, exact) < relative(few, exact)
    assert approximation.pinv_status is None and np.isnan(approximation.pinv_residual)


def test_features_and_projected_default_to_landmarks():
    q, k, v = qkv()
    for method, size in (("performer", "features"), ("linformer", "projected")):
        np.testing.assert_array_equal(nystrom.attention(q, k, v, method=method, landmarks=12),
                                      nystrom.attention(q, k, v, method=method, **{size: 12}))


def test_approximation_object():
    q, k, v = qkv()
    approximation = nystrom.approximate(q, k, v, landmarks=6, pinv="razavi", pinv_iters=4)
    assert approximation.method == "pnp-nystra" and approximation.pinv_status in ("completed", "converged")
    assert approximation.factors.pinv.iterations == 4
    assert approximation.pinv_residual == pytest.approx(approximation.factors.pinv.residual)
    np.testing.assert_allclose(approximation.output, approximation.implied_attention() @ v, rtol=1e-10)
    assert nystrom.approximate(q, k, v, method="exact").implied_attention() is None
    assert nystrom.approximate(q, k, v, method="nystromformer", landmarks=6).factors is None
    assert "Nystromformer" in nystrom.approximate(q, k, v, method="nystromformer", landmarks=6).implied_matrix


# ---------------------------------------------------------------------------------------------------------------
# errors and spectra

@pytest.mark.parametrize("dtype", DTYPES)
def test_output_errors(dtype):
    exact, approximate = tokens(10, 4, dtype, 21), tokens(10, 4, dtype, 22)
    errors = nystrom.output_errors(exact, approximate)
    difference = exact.astype(float) - approximate.astype(float)
    reference = np.linalg.norm(difference) / np.linalg.norm(exact.astype(float))
    assert errors.relative_frobenius == pytest.approx(reference, rel=1e-6)
    assert errors.max_abs == pytest.approx(np.abs(difference).max(), rel=1e-6)
    assert errors.mean_abs == pytest.approx(np.abs(difference).mean(), rel=1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_singular_values(dtype):
    a = tokens(30, 20, dtype, 23)
    reference = np.linalg.svd(a.astype(float), compute_uv=False)
    values = nystrom.singular_values(a)
    assert values.dtype == np.float64
    np.testing.assert_allclose(values, reference, rtol=10 * np.finfo(dtype).eps * 30)
    for augmented in (False, True):
        top = nystrom.top_singular_values(a, 4, augmented=augmented)
        assert top.converged and top.values.shape == (4,)
        np.testing.assert_allclose(top.values, reference[:4], rtol=1e-5 if dtype == np.float32 else 1e-8)
    assert nystrom.numerical_rank(reference, 1e-3) == np.sum(reference > 1e-3 * reference[0])
    assert nystrom.energy_fraction(reference, 3) == pytest.approx((reference[:3] ** 2).sum() / (reference**2).sum())
    # Singular values of either dtype, any stride; a matrix or integers are refused naming the shape or dtype (a
    # 2-D array raised nanobind's TypeError listing the signature).
    assert nystrom.numerical_rank(reference.astype(np.float32), 1e-3) == nystrom.numerical_rank(reference, 1e-3)
    assert nystrom.numerical_rank(np.repeat(reference, 2)[::2], 1e-3) == nystrom.numerical_rank(reference, 1e-3)
    with pytest.raises(ValueError, match=r"numerical_rank: singular_values has shape \(30, 20\); expected a vector"):
        nystrom.numerical_rank(a)
    with pytest.raises(ValueError, match="energy_fraction: singular_values has dtype int64"):
        nystrom.energy_fraction(np.arange(3)[::-1], 1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel", ["exp", "laplacian"])
def test_kernel_norm_and_spectrum_matrix_free(dtype, kernel):
    q, k = tokens(40, 6, dtype, 24), tokens(40, 6, dtype, 25)
    reference = np.linalg.svd(kernel_ref(q, k, kernel), compute_uv=False)
    for solver in ("dense", "lanczos", "matrix-free"):
        norm = nystrom.kernel_norm(q, k, kernel=kernel, solver=solver)
        assert norm == pytest.approx(reference[0], rel=10 * TOLERANCE[dtype])
    top = nystrom.kernel_singular_values(q, k, 5, kernel=kernel)
    np.testing.assert_allclose(top.values, reference[:5], rtol=10 * TOLERANCE[dtype])


def test_kernel_norm_of_a_kernel_whose_square_overflows_by_every_solver():
    # Logits of 706 on 4 equal tokens: G = e^706·11ᵀ, ‖G‖₂ = 4e^706 ≈ 1.6e307 is finite, its square is not.
    q = np.full((4, 1), np.sqrt(706.0))
    expected = 4 * np.exp(q[0, 0] * q[0, 0])
    for solver in ("dense", "lanczos", "matrix-free"):
        assert nystrom.kernel_norm(q, q, scale=1.0, solver=solver) == pytest.approx(expected, rel=1e-13)


def errors_whose_squares_overflow(dtype):
    # A last coordinate adds s·40·60 = 600 to every logit: ‖G − Ĝ‖₂ ~ e^600 ≈ 4e260 is finite, but its square, which the
    # Gram products of the matrix-free Lanczos hold, is not (they failed as not finite). Tokens in steps of 1/4
    # and s = 1/4 make every logit exact in float32 too. Yields (stabilization, q, k, factors, c, G_c, E_c), the
    # oracle E_c = e^{−c}(G − Ĝ), c the largest logit, formed in numpy from the factors' own arrays
    # (Ĝ = diag(exp(left_log_scale))·left·z·upper). float32 blocks without row scales (e^600) overflow.
    rng = np.random.default_rng(1)
    n, d, s = 48, 8, 0.25
    q = np.hstack([rng.integers(-4, 5, (n, d)) / 4, np.full((n, 1), 40.0)])
    k = np.hstack([rng.integers(-4, 5, (n, d)) / 4, np.full((n, 1), 60.0)])
    logits = s * q @ k.T
    c = logits.max()
    g_c = np.exp(logits - c)
    stabilizations = ("row-max", "none", "clamped") if dtype == np.float64 else ("row-max", "clamped")
    for stabilization in stabilizations:
        factors = nystrom.nystrom_factors(q.astype(dtype), k.astype(dtype), landmarks=8, scale=s,
                                          stabilization=stabilization)
        left, z, upper = (np.asarray(a, dtype=float) for a in (factors.left, factors.z, factors.upper))
        g_hat_c = np.exp(np.asarray(factors.left_log_scale, dtype=float) - c)[:, None] * (left @ z @ upper)
        yield stabilization, q.astype(dtype), k.astype(dtype), factors, c, g_c, g_c - g_hat_c


@pytest.mark.parametrize("dtype", DTYPES)
def test_error_norm_matrix_free_of_an_error_whose_square_overflows(dtype):
    for stabilization, q, k, factors, c, g_c, e_c in errors_whose_squares_overflow(dtype):
        expected = np.linalg.norm(e_c, 2)
        # Rounding of G's entries relative to ‖G‖₂, which the difference G − Ĝ amplifies by ‖G‖₂/‖E‖₂, with
        # headroom for Lanczos's tolerance 1e-13 on σ².
        tolerance = 256 * np.finfo(np.float64).eps * (1 + np.linalg.norm(g_c, 2) / expected)
        # The stored solvers need G in float32 (a ValueError).
        solvers = ("matrix-free", "dense", "lanczos") if dtype == np.float64 else ("matrix-free",)
        for solver in solvers:
            error = nystrom.error_norm(q, k, factors, solver=solver)
            assert error / np.exp(c) == pytest.approx(expected, rel=tolerance), (stabilization, solver)


@pytest.mark.parametrize("dtype", DTYPES)
def test_error_singular_values_of_an_error_whose_square_overflows(dtype):
    # The top singular values of E, computed on E_c and multiplied back by e^c (the Gram products of the
    # unshifted E, ~e^1200, failed as not finite), with their certificate, by both Lanczos forms.
    count = 4
    for stabilization, q, k, factors, c, g_c, e_c in errors_whose_squares_overflow(dtype):
        expected = np.linalg.svd(e_c, compute_uv=False)
        # Rounding of G's entries, about eps·‖G‖₂ on every singular value of G − Ĝ, with headroom for Lanczos's
        # tolerance 1e-13.
        tolerance = 256 * np.finfo(np.float64).eps * np.linalg.norm(g_c, 2)
        for augmented in (False, True):
            top = nystrom.error_singular_values(q, k, factors, count, augmented=augmented)
            where = (stabilization, augmented)
            assert top.converged, where
            np.testing.assert_allclose(top.values / np.exp(c), expected[:count], rtol=0, atol=tolerance,
                                       err_msg=str(where))
            bound = top.last_error_bound / np.exp(c)
            assert np.min(np.abs(expected - top.values[-1] / np.exp(c))) <= bound + tolerance, where


@pytest.mark.parametrize("dtype", DTYPES)
def test_error_norm_by_every_solver(dtype):
    q, k, _ = qkv(n=64, dtype=dtype)
    factors = nystrom.nystrom_factors(q, k, landmarks=8)
    error = kernel_ref(q, k) - factors.dense().astype(float)
    reference = np.linalg.svd(error, compute_uv=False)
    # The library forms G − Ĝ in the tokens' precision, so float32 differs from the float64 reference by
    # rounding relative to ‖G‖, not to ‖G − Ĝ‖.
    tolerance = 1e-6 * np.linalg.norm(kernel_ref(q, k), 2) if dtype == np.float32 else 1e-9 * reference[0]
    for solver in ("dense", "lanczos", "matrix-free"):
        assert abs(nystrom.error_norm(q, k, factors, solver=solver) - reference[0]) < tolerance
    top = nystrom.error_singular_values(q, k, factors, 3)
    np.testing.assert_allclose(top.values, reference[:3], atol=tolerance)


def test_spectral_values_of_tiny_kernels_and_mismatched_factors():
    # G = e^-30·G0 (a constant logit -30 on an extra coordinate): Lanczos gave values 13-25% off, as converged.
    rng = np.random.default_rng(0)
    n, s = 60, 0.5
    q0, k0 = 0.5 * rng.standard_normal((n, 4)), 0.5 * rng.standard_normal((n, 4))
    q, k = np.hstack([q0, np.ones((n, 1))]), np.hstack([k0, np.full((n, 1), -30 / s)])
    sv = np.linalg.svd(nystrom.kernel_matrix(q, k, scale=s), compute_uv=False)
    top = nystrom.kernel_singular_values(q, k, 3, scale=s)
    assert top.converged
    np.testing.assert_allclose(top.values, sv[:3], rtol=1e-9)
    for solver in ("dense", "lanczos", "matrix-free"):
        assert abs(nystrom.kernel_norm(q, k, scale=s, solver=solver) / sv[0] - 1) < 1e-9, solver
    factors = nystrom.nystrom_factors(q, k, landmarks=8)
    with pytest.raises(ValueError, match="landmarks have d = 5, but q has 4"):
        nystrom.error_norm(q[:, :4], k[:, :4], factors)
    # A count beyond the smaller dimension is named as the argument `count` (not the library's k, which would
    # read as the keys).
    with pytest.raises(ValueError, match=r"kernel_singular_values: count = 41 must be in \[1, 40\] .*60x40"):
        nystrom.kernel_singular_values(q, k[:40], 41, scale=s)
    with pytest.raises(ValueError, match=r"error_singular_values: count = 0 must be in \[1, 60\]"):
        nystrom.error_singular_values(q, k, factors, 0)
    with pytest.raises(ValueError, match=r"top_singular_values: count = 5 must be in \[1, 4\]"):
        nystrom.top_singular_values(np.ones((4, 7)), 5)
    # Empty tokens are refused naming the shapes (q of 0 rows crashed the interpreter).
    for solver in ("dense", "lanczos", "matrix-free"):
        with pytest.raises(ValueError, match="kernel_norm: empty tokens, q is 0x5 and k is 60x5"):
            nystrom.kernel_norm(q[:0], k, solver=solver)
    with pytest.raises(ValueError, match="kernel_singular_values: empty tokens, q is 60x5 and k is 0x5"):
        nystrom.kernel_singular_values(q, k[:0], 1)
    with pytest.raises(ValueError, match="safe_alpha: A is empty \\(3x0\\)"):
        nystrom.safe_alpha(np.ones((3, 0)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_spectral_norms_of_rank_one_zero_and_overflowing_operators(dtype):
    # Equal tokens: G = e^{s‖q‖²}·11ᵀ has rank 1, and Ĝ = G (Corollary 2.2), so G − Ĝ is zero, exactly for
    # zero tokens. Spectra's Lanczos returned ‖G‖₂ wrong on these, as converged (28926 for 33.9 at N = 33,
    # c = 0.1), and failed on the zero operator; every solver now gives the SVD's values. Logits beyond exp's
    # range give a ValueError, not NaN.
    tolerance = 1e-6 if dtype == np.float32 else 1e-9
    for n, c in ((33, 0.1), (33, 0.5), (33, 1.0), (64, 0.0), (200, 1.0)):
        q = np.full((n, 8), c, dtype=dtype)
        factors = nystrom.nystrom_factors(q, q, landmarks=4)
        g = np.linalg.norm(kernel_ref(q, q), 2)
        for solver in ("dense", "lanczos", "matrix-free"):
            assert abs(nystrom.kernel_norm(q, q, solver=solver) - g) < tolerance * g, (n, c, solver)
            assert nystrom.error_norm(q, q, factors, solver=solver) < tolerance * g, (n, c, solver)
        np.testing.assert_allclose(nystrom.error_singular_values(q, q, factors, 3).values, 0, atol=tolerance * g)
    huge = 20 * tokens(33, 8, dtype, seed=1)
    huge_factors = nystrom.nystrom_factors(huge, huge, landmarks=8)
    overflow = r"exp\(s=0.353553\): largest logit [0-9.]+ exceeds 709.783 = log\(DBL_MAX\)"
    for solver in ("dense", "lanczos", "matrix-free"):
        with pytest.raises(ValueError, match="error_norm: " + overflow):
            nystrom.error_norm(huge, huge, huge_factors, solver=solver)
        with pytest.raises(ValueError, match="kernel_norm: " + overflow):
            nystrom.kernel_norm(huge, huge, solver=solver)
    for name, call in (
        ("kernel_singular_values", lambda: nystrom.kernel_singular_values(huge, huge, 2)),
        ("error_singular_values", lambda: nystrom.error_singular_values(huge, huge, huge_factors, 2)),
        ("landmark_terms", lambda: nystrom.landmark_terms(huge, huge, huge_factors)),
    ):
        with pytest.raises(ValueError, match=name + ": " + overflow):
            call()


def test_float32_kernels_beyond_its_range():
    # Logits up to 49 (entries 2e21: finite in float32, but the Gram products of Lanczos are not) and 113
    # (entries beyond float32): norms and the Lemma 2.1 terms as float64 gives them, through the log-shift and
    # an exact power-of-two scaling; a dense block that cannot be stored in float32 is refused naming the logit.
    q, k = tokens(64, 8, seed=3), tokens(64, 8, seed=4)
    for scale in (13.0, 30.0):
        q64 = scale * q
        q32, k32 = q64.astype(np.float32), k.astype(np.float32)
        reference = nystrom.kernel_norm(q32.astype(float), k32.astype(float), solver="dense")
        # exp carries the float32 rounding of its logit x relatively as eps·|x|.
        tolerance = 16 * np.finfo(np.float32).eps * np.max(q32.astype(float) @ k32.astype(float).T) / np.sqrt(8)
        for solver in ("dense", "lanczos", "matrix-free"):
            assert abs(nystrom.kernel_norm(q32, k32, solver=solver) / reference - 1) < tolerance, (scale, solver)
        factors32 = nystrom.nystrom_factors(q32, k32, landmarks=6, strategy="step")
        factors64 = nystrom.nystrom_factors(q32.astype(float), k32.astype(float), landmarks=6, strategy="step")
        terms32 = nystrom.landmark_terms(q32, k32, factors32)
        terms64 = nystrom.landmark_terms(q32.astype(float), k32.astype(float), factors64)
        # σ_m(G_A) at the larger scale lies 53 orders below σ₁(G̃): beyond float32's range, 0 there.
        for name in ("sigma1_ext", "sigma_m1_ext") + (("sigma_m_core",) if scale == 13.0 else ()):
            assert abs(getattr(terms32, name) / getattr(terms64, name) - 1) < tolerance, (scale, name)
        if scale == 30.0:
            for call in (lambda: nystrom.kernel_matrix(q32, k32),
                         lambda: nystrom.error_norm(q32, k32, factors32, solver="lanczos")):
                with pytest.raises(ValueError, match=r"overflows float32: its largest exponent 11[0-9.]+ exceeds "
                                                     r"log\(max\) = 88.72"):
                    call()
        else:
            error = nystrom.error_norm(q32, k32, factors32, solver="lanczos")
            assert abs(error / nystrom.error_norm(q32, k32, factors32, solver="dense") - 1) < tolerance


def test_errors_name_the_head_and_the_value():
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((3, 4, 33, 8)) for _ in range(3))
    q[2, 3, 0, 0] = np.nan
    for layout in (np.ascontiguousarray, np.asfortranarray):
        with pytest.raises(ValueError, match=r"head 11 \(b = 2, h = 3\)"):
            nystrom.attention(layout(q), k, v, method="pnp-nystra", landmarks=4)
    for call, message in (
        (lambda: nystrom.kernel_matrix(q[0, 0, :, :0], k[0, 0, :, :0]), "the tokens have d = 0 features"),
        (lambda: nystrom.attention(k[0, 0, :, :0], k[0, 0, :, :0], v[0, 0]), "the tokens have d = 0 features"),
        (lambda: nystrom.attention(k[0, 0], k[0, 0], v[0, 0], method="cur", landmarks=4, strategy="random",
                                   seed=-1), r"seed = -1 is out of range"),
        (lambda: nystrom.pseudoinverse(np.eye(3), pinv="razavi", pinv_iters=10**5),
         "iterations = 100000 must be between 1 and 10000"),
    ):
        with pytest.raises(ValueError, match=message):
            call()
    report = nystrom.evaluate_bounds(sigma1_ext=2.0, sigma_m1_ext=0.1, sigma_m_core=1.0, spectral_error=0.05,
                                     theorem3_k=3.0)
    for slack in (np.nan, -1.0):
        with pytest.raises(ValueError, match="holds: slack = "):
            report.holds(slack)
    flagged = nystrom.attention(k[0, 0], k[0, 0], v[0, 0], method="cur", landmarks=4, strategy="random",
                                different_indices=np.bool_(True))
    plain = nystrom.attention(k[0, 0], k[0, 0], v[0, 0], method="cur", landmarks=4, strategy="random",
                              different_indices=True)
    np.testing.assert_array_equal(flagged, plain)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scale", (1e-250, 1e250))
def test_iterative_pseudoinverses_at_the_ends_of_double(dtype, scale):
    # α = 1/(‖A‖₁‖A‖_∞) under- or overflows here (Z was 0, "completed"); the steps run on A scaled by a power
    # of two. In float32 the same at 1e∓30.
    scale = scale if dtype == np.float64 else (1e-30 if scale < 1 else 1e30)
    a = np.random.default_rng(6).standard_normal((6, 6)) + 6 * np.eye(6)
    for pinv in ("razavi", "newton-schulz"):
        result = nystrom.pseudoinverse((scale * a).astype(dtype), pinv=pinv, pinv_iters=60,
                                       pinv_tolerance=1e-12 if dtype == np.float64 else 1e-5)
        assert result.status == "converged", pinv
        assert relative(result.z.astype(float) * scale, np.linalg.pinv(a)) < TOLERANCE[dtype], pinv


@pytest.mark.parametrize("dtype", DTYPES)
def test_evaluate_against_dense_matrices(dtype):
    q, k, v = qkv(n=40, dtype=dtype)
    exact = nystrom.attention(q, k, v, method="exact").astype(float)
    for method in ("nystromformer", "pnp-nystra"):
        approximation = nystrom.approximate(q, k, v, method=method, landmarks=5)
        if method == "pnp-nystra":
            reference, approximate = kernel_ref(q, k), approximation.factors.dense().astype(float)
        else:
            reference = nystrom.attention_matrix(q, k).astype(float)
            approximate = approximation.implied_attention().astype(float)
        difference = reference - approximate
        dense = nystrom.evaluate(q, k, v, method=method, landmarks=5)
        assert dense["method"] == method and dense["n"] == 40 and dense["landmarks"] == 5
        assert dense["precision"] == ("float" if dtype == np.float32 else "double")
        # float32 forms the difference in float32: rounding relative to the reference, not to the difference.
        scale = np.linalg.norm(reference, 2) if dtype == np.float32 else np.linalg.norm(difference, 2)
        assert abs(dense["spectral_error"] - np.linalg.norm(difference, 2)) <= 10 * TOLERANCE[dtype] * scale
        assert dense["relative_spectral_error"] == pytest.approx(
            dense["spectral_error"] / np.linalg.norm(reference, 2), rel=10 * TOLERANCE[dtype])
        assert abs(dense["frobenius_error"] - np.linalg.norm(difference)) <= 10 * TOLERANCE[dtype] * np.linalg.norm(
            reference)
        output = approximation.output.astype(float)
        assert dense["output_relative_error"] == pytest.approx(
            np.linalg.norm(exact - output) / np.linalg.norm(exact), rel=1e-3 if dtype == np.float32 else 1e-10)
        assert dense["matrix_free"] == 0
        free = nystrom.evaluate(q, k, v, method=method, landmarks=5, matrix_free=True)
        assert free["matrix_free"] == 1
        for column in ("spectral_error", "frobenius_error"):
            assert free[column] == pytest.approx(dense[column], rel=1e-4 if dtype == np.float32 else 1e-8)
    without_v = nystrom.evaluate(q, k, method="pnp-nystra", landmarks=5)
    assert np.isnan(without_v["output_relative_error"]) and without_v["dv"] == 0
    assert np.isfinite(without_v["bound_ratio"]) and without_v["bounds_hold"] == 1


def test_evaluate_unstabilized_float32_rows_that_underflow_give_a_nan_output_error_not_a_crash():
    # Logits spread over hundreds: on κ_c (c the largest logit) a row whose logits against the landmarks all lie
    # more than about 103 below c has G_L's row 0 in float32, so its output row is 0/0 (docs/formats.md §2,
    # output_relative_error). Row-max scaling keeps every row.
    rng = np.random.default_rng(0)
    q, k = ((rng.standard_normal((256, 16)) * 10).astype(np.float32) for _ in range(2))
    v = rng.standard_normal((256, 4)).astype(np.float32)
    assert ((q @ k.T).max(axis=1) / 4 < (q @ k.T).max() / 4 - 104).any()
    unstabilized = nystrom.evaluate(q, k, v, method="pnp-nystra", landmarks=16, stabilization="none")
    assert np.isnan(unstabilized["output_relative_error"]) and np.isnan(unstabilized["output_max_error"])
    assert np.isfinite(unstabilized["spectral_error"]) and unstabilized["pinv_status"] == "converged"
    scaled = nystrom.evaluate(q, k, v, method="pnp-nystra", landmarks=16, stabilization="row-max")
    assert np.isfinite(scaled["output_relative_error"]) and np.isfinite(scaled["output_max_error"])


def test_evaluate_rejects_bad_keywords():
    q, k, v = qkv(n=16)
    with pytest.raises(TypeError, match="unexpected keyword argument 'landmark'"):
        nystrom.evaluate(q, k, v, landmark=4)
    with pytest.raises(ValueError, match="17"):
        nystrom.evaluate(q, k, v, landmarks=17)


@pytest.mark.parametrize("dtype", DTYPES)
def test_evaluate_with_bias_against_numpy(dtype):
    """bias= (a dump's bias plus mask): the exact side is exp(s q k^T + bias), the approximations q and k alone."""
    n = 40
    q, k, v = qkv(n=n, dtype=dtype)
    rng = np.random.default_rng(7)
    halves = np.arange(n) < n // 2
    bias = (rng.standard_normal((n, n)) - 100.0 * (halves[:, None] != halves[None, :])).astype(dtype)
    model = kernel_ref(q, k) * np.exp(bias.astype(float))
    attention = model / model.sum(axis=1, keepdims=True)
    exact = attention @ v.astype(float)
    for method in ("pnp-nystra", "nystromformer", "exact"):
        approximation = nystrom.approximate(q, k, v, method=method, landmarks=5)
        point = nystrom.evaluate(q, k, v, bias, method=method, landmarks=5)
        output = approximation.output.astype(float)
        assert point["output_relative_error"] == pytest.approx(
            np.linalg.norm(exact - output) / np.linalg.norm(exact), rel=1e-3 if dtype == np.float32 else 1e-10)
        if method == "exact":
            continue
        if method == "pnp-nystra":
            reference, approximate = model, approximation.factors.dense().astype(float)
        else:
            reference, approximate = attention, approximation.implied_attention().astype(float)
        difference = reference - approximate
        assert abs(point["spectral_error"] - np.linalg.norm(difference, 2)) <= 10 * TOLERANCE[dtype] * np.linalg.norm(
            reference, 2)
        assert point["relative_spectral_error"] == pytest.approx(
            np.linalg.norm(difference, 2) / np.linalg.norm(reference, 2), rel=10 * TOLERANCE[dtype], abs=1e-6)
    plain = nystrom.evaluate(q, k, v, method="pnp-nystra", landmarks=5)
    zero = nystrom.evaluate(q, k, v, np.zeros((n, n), dtype), method="pnp-nystra", landmarks=5)
    assert zero["relative_spectral_error"] == pytest.approx(plain["relative_spectral_error"], rel=TOLERANCE[dtype])
    with pytest.raises(ValueError, match="bias is 40x39"):
        nystrom.evaluate(q, k, v, np.zeros((n, n - 1), dtype))
    other = np.float64 if dtype == np.float32 else np.float32
    with pytest.raises(ValueError, match="bias"):
        nystrom.evaluate(q, k, v, bias=np.zeros((n, n), other))


@pytest.mark.parametrize("dtype", DTYPES)
def test_landmark_terms_and_bounds(dtype):
    q, k, _ = qkv(n=40, d=4, dtype=dtype)
    factors = nystrom.nystrom_factors(q, k, landmarks=5, stabilization="none")
    q_bar, k_bar = factors.landmarks.q.astype(float), factors.landmarks.k.astype(float)
    extended = kernel_ref(np.vstack([q_bar, q]), np.vstack([k_bar, k]))
    sigma = np.linalg.svd(extended, compute_uv=False)
    core = kernel_ref(q_bar, k_bar)
    left, upper = kernel_ref(q, k_bar), kernel_ref(q_bar, k)
    inverse = np.linalg.inv(core)
    k_reference = (1 + np.linalg.norm(left @ inverse, 2)) * (1 + np.linalg.norm(inverse @ upper, 2))
    terms = nystrom.landmark_terms(q, k, factors)
    # Singular values of matrices formed in the tokens' precision: errors of rounding relative to σ₁.
    rounding = (1e-5 if dtype == np.float32 else 1e-12) * sigma[0]
    assert abs(terms.sigma1_ext - sigma[0]) < rounding
    assert abs(terms.sigma_m1_ext - sigma[5]) < rounding
    assert abs(terms.sigma_m_core - np.linalg.svd(core, compute_uv=False)[4]) < rounding
    assert terms.theorem3_k == pytest.approx(k_reference, rel=1e-2 if dtype == np.float32 else 1e-6)
    assert nystrom.theorem3_constant(left, core, upper) == pytest.approx(k_reference, rel=1e-8)
    error = nystrom.error_norm(q, k, factors, solver="dense")
    report = nystrom.evaluate_bounds(terms, error)
    s1, sm1, a = terms.sigma1_ext, terms.sigma_m1_ext, terms.sigma_m_core
    # The theorems are taken at σ̄ = σ_{m+1} + its margin, here (a full SVD) the rounding floor (N + m)·eps·σ₁.
    assert terms.sigma_m1_margin == pytest.approx((40 + 5) * np.finfo(dtype).eps * s1, rel=1e-12)
    upper = sm1 + terms.sigma_m1_margin
    assert report.ratio == pytest.approx(sm1 / a)
    assert report.theorem2 == pytest.approx(2 * s1**2 * upper / a**2) and report.theorem2_applies
    assert report.theorem1_applies == (a > upper)
    assert report.c_emp == pytest.approx(error * a / sm1)
    assert report.holds()
    explicit = nystrom.evaluate_bounds(sigma1_ext=s1, sigma_m1_ext=sm1, sigma_m_core=a, spectral_error=error,
                                       theorem3_k=terms.theorem3_k, sigma_m1_margin=terms.sigma_m1_margin)
    assert explicit.theorem2 == report.theorem2
    at_computed = nystrom.evaluate_bounds(sigma1_ext=s1, sigma_m1_ext=sm1, sigma_m_core=a, spectral_error=error,
                                          theorem3_k=terms.theorem3_k)
    assert at_computed.theorem2 == pytest.approx(2 * s1**2 * sm1 / a**2) and at_computed.theorem2 < report.theorem2
    vacuous = nystrom.evaluate_bounds(sigma1_ext=10.0, sigma_m1_ext=2.0, sigma_m_core=1.0, spectral_error=1.0,
                                      theorem3_k=5.0)
    assert not vacuous.theorem1_applies and np.isnan(vacuous.theorem1) and not vacuous.theorem3_applies


def test_exact_recovery_for_rank_m_kernels():
    # Corollary 2.2: with m landmarks and rank(G̃) = m the approximation is exact. A Gaussian kernel of tokens
    # that repeat m distinct rows has rank m.
    distinct = tokens(4, 3, np.float64, 26)
    q = np.repeat(distinct, 8, axis=0)
    factors = nystrom.nystrom_factors(q, q, kernel="gaussian", bandwidth=2.0, landmarks=4, strategy="step",
                                      stabilization="none")
    g_norm = nystrom.kernel_norm(q, q, kernel="gaussian", bandwidth=2.0)
    assert nystrom.error_norm(q, q, factors, solver="dense") < 1e-10 * g_norm


# ---------------------------------------------------------------------------------------------------------------
# arrays: dtypes, layouts, batches, torch tensors

@pytest.mark.parametrize("dtype", DTYPES)
def test_layouts_give_identical_results(dtype):
    # C-contiguous arrays take the row-major code, the others column-major matrices (views or copies): the same
    # bits within each, the same values to rounding across the two (the GEMMs may sum in another order).
    q, k, v = qkv(dtype=dtype)
    reference = nystrom.attention(q, k, v, landmarks=6)
    readonly = [x.copy() for x in (q, k, v)]
    for x in readonly:
        x.flags.writeable = False
    np.testing.assert_array_equal(nystrom.attention(*readonly, landmarks=6), reference)
    fortran = nystrom.attention(*(np.asfortranarray(x) for x in (q, k, v)), landmarks=6)
    assert relative(fortran, reference) < TOLERANCE[dtype]
    wide = [np.repeat(x, 2, axis=1) for x in (q, k, v)]  # every other column: strided views
    strided = [x[:, ::2] for x in wide]
    np.testing.assert_array_equal(nystrom.attention(*strided, landmarks=6), fortran)
    # Big-endian arrays (h5py reads '>f4' datasets so) were refused with a TypeError naming no argument.
    big_endian = [x.astype(x.dtype.newbyteorder(">")) for x in (q, k, v)]
    np.testing.assert_array_equal(nystrom.attention(*big_endian[:1], k=big_endian[1], v=big_endian[2], landmarks=6),
                                  reference)
    singular = nystrom.singular_values(nystrom.kernel_matrix(q, k))
    assert nystrom.numerical_rank(singular.astype(">f8")) == nystrom.numerical_rank(singular)
    # Nested lists and tuples (numpy.typing.ArrayLike, as the signatures say) were refused with a TypeError listing
    # the signature; they are read as float64 arrays, positional or by keyword, and by the factors' methods too. A
    # list of integers is refused as an integer array is, naming the argument.
    as_double = [x.astype(np.float64) for x in (q, k, v)]
    np.testing.assert_array_equal(nystrom.attention(q.tolist(), k=k.tolist(), v=tuple(map(tuple, v.tolist())),
                                                    landmarks=6),
                                  nystrom.attention(*as_double, landmarks=6))
    factors = nystrom.nystrom_factors(*as_double[:2], landmarks=6)
    np.testing.assert_array_equal(factors.apply(as_double[2][:, 0].tolist()), factors.apply(as_double[2][:, 0]))
    np.testing.assert_array_equal(factors.attention(v=as_double[2].tolist()), factors.attention(as_double[2]))
    assert nystrom.numerical_rank(singular.tolist()) == nystrom.numerical_rank(singular)
    # Keyword arrays are those each signature declares (x, y; singular_values), integer sequences stay lists.
    np.testing.assert_array_equal(nystrom.kernel_matrix(x=as_double[0].tolist(), y=as_double[1].tolist()),
                                  nystrom.kernel_matrix(*as_double[:2]))
    assert nystrom.energy_fraction(singular_values=[3.0, 4.0, 0.0], k=1) == pytest.approx(9 / 25)
    forced = nystrom.select_landmarks(*as_double[:2], landmarks=6, strategy="random", forced=[2, 5])
    assert {2, 5} <= set(forced.q_indices)
    with pytest.raises(ValueError, match="q has dtype int64; expected float32 or float64"):
        nystrom.attention([[1, 2], [3, 4]], k, v)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method", nystrom.METHODS)
def test_c_and_fortran_order_give_the_same_output(dtype, method):
    # C-ordered arrays are read in place as row-major heads and give a C-ordered output; Fortran-ordered ones
    # are read in place as column-major matrices and give a Fortran-ordered one. The same bits for the methods
    # that copy row-major heads to column-major; pnp-nystra and symmetric-nystrom compute on the row-major
    # heads, where the GEMMs may round differently: the same values to rounding (amplified by the core's
    # conditioning). Heads of a batch run one per thread, which changes exact attention's panels: to rounding.
    q, k, v = qkv(n=300, d=12, dv=7, dtype=dtype, seed=5)
    options = {"method": method, "landmarks": 5, "seed": 3}
    c_order = nystrom.attention(q, k, v, **options)
    fortran = nystrom.attention(*(np.asfortranarray(x) for x in (q, k, v)), **options)
    assert c_order.flags.c_contiguous and fortran.flags.f_contiguous
    if method in ("pnp-nystra", "symmetric-nystrom"):
        assert relative(c_order, fortran) < TOLERANCE[dtype]
    else:
        np.testing.assert_array_equal(c_order, fortran)
    rng = np.random.default_rng(8)
    batch = [rng.standard_normal((2, 3, 40, c)).astype(dtype) for c in (12, 12, 7)]
    out = nystrom.attention(*batch, **options)
    assert out.flags.c_contiguous
    for b in range(2):
        for h in range(3):
            head = [np.asfortranarray(x[b, h]) for x in batch]
            assert relative(out[b, h], nystrom.attention(*head, **options)) < TOLERANCE[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method", nystrom.METHODS)
def test_batches_loop_over_leading_dimensions(dtype, method):
    rng = np.random.default_rng(27)
    q, k = (rng.standard_normal((2, 3, 32, 8)).astype(dtype) for _ in range(2))
    v = rng.standard_normal((2, 3, 32, 5)).astype(dtype)
    options = {"method": method, "landmarks": 4, "seed": 1}
    out = nystrom.attention(q, k, v, **options)
    assert out.shape == (2, 3, 32, 5) and out.dtype == dtype
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    for b in range(2):
        for h in range(3):
            np.testing.assert_allclose(out[b, h], nystrom.attention(q[b, h], k[b, h], v[b, h], **options),
                                       rtol=tolerance, atol=tolerance)
    # A non-contiguous batch ([3, 2, N, d] view) takes column-major copies: the same values to rounding.
    heads_last = np.moveaxis(q, 1, 0)
    assert relative(nystrom.attention(heads_last, np.moveaxis(k, 1, 0), np.moveaxis(v, 1, 0), **options),
                    np.moveaxis(out, 1, 0)) < TOLERANCE[dtype]


@pytest.mark.parametrize("layout", ("C", "F"))
def test_undefined_rows_warn_and_the_other_methods_stay_finite(layout):
    # Logits far beyond exp's range (tokens ~ N(0, 300²), d = 8): row-max PnP-Nystra's core underflows to 0,
    # so its row sums vanish and rows of Ô are 0/0 (docs/mathematics.md §2); a RuntimeWarning names them, as
    # numpy warns of invalid values. The clamped kernel, Performer's balanced features and the softmax methods
    # give finite outputs on the same tokens.
    rng = np.random.default_rng(0)
    q, k = (300 * rng.standard_normal((2, 3, 37, 8)).astype(np.float32) for _ in range(2))
    v = rng.standard_normal((2, 3, 37, 8)).astype(np.float32)
    if layout == "F":
        q, k, v = (np.asfortranarray(x) for x in (q, k, v))
    with pytest.warns(RuntimeWarning, match=r"pnp-nystra gave 222 of 222 output rows that are not finite, in 6 "
                                            r"of 6 heads \(the first: head 0"):
        out = nystrom.attention(q, k, v, landmarks=16)
    assert not np.isfinite(out).all(axis=-1).any()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for options in ({"landmarks": 16, "stabilization": "clamped"}, {"method": "performer"},
                        {"method": "nystromformer", "landmarks": 16}, {"method": "linformer"},
                        {"method": "exact"}):
            assert np.isfinite(nystrom.attention(q, k, v, **options)).all(), options


def test_an_empty_batch():
    q = np.zeros((0, 16, 4))
    assert nystrom.attention(q, q, q, landmarks=2).shape == (0, 16, 4)
    out = np.empty_like(q)
    assert nystrom.attention(q, q, q, landmarks=2, out=out) is out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("method", ("exact", "pnp-nystra", "performer"))
def test_out_receives_the_output(dtype, method):
    # out= writes into the caller's array (reused across calls, it saves a new output's allocation and first
    # touch) and returns it: the same values as a new output, from C-ordered inputs (read in place), Fortran-ordered
    # ones (converted) and single heads.
    rng = np.random.default_rng(28)
    q, k = (rng.standard_normal((2, 3, 32, 8)).astype(dtype) for _ in range(2))
    v = rng.standard_normal((2, 3, 32, 5)).astype(dtype)
    options = {"method": method, "landmarks": 4}
    out = np.full((2, 3, 32, 5), np.nan, dtype=dtype)
    assert nystrom.attention(q, k, v, out=out, **options) is out
    np.testing.assert_array_equal(out, nystrom.attention(q, k, v, **options))
    fortran = [np.asfortranarray(x) for x in (q, k, v)]
    out.fill(np.nan)
    nystrom.attention(*fortran, out=out, **options)
    np.testing.assert_array_equal(out, nystrom.attention(*fortran, **options))
    head = out[1, 2]
    head.fill(np.nan)
    assert nystrom.attention(q[1, 2], k[1, 2], v[1, 2], out=head, **options) is head
    np.testing.assert_array_equal(head, nystrom.attention(q[1, 2], k[1, 2], v[1, 2], **options))


def test_out_is_checked():
    rng = np.random.default_rng(29)
    q, k, v = (rng.standard_normal((2, 16, 4)).astype(np.float32) for _ in range(3))
    refusals = {
        r"out has shape \(2, 16, 3\) but the output is \(2, 16, 4\)": np.empty((2, 16, 3), np.float32),
        r"out has dtype float64 but the output is float32 \(q's dtype\)": np.empty((2, 16, 4)),
        r"out is not C-contiguous \(its dimension 2 has stride 2, expected 1\)":
            np.empty((2, 16, 8), np.float32)[..., ::2],
        r"out \(type list\) is not a writable array": [0.0],
        "out overlaps v, which is read while out is written": v,
        "out overlaps q": np.lib.stride_tricks.as_strided(q[1:], (2, 16, 4)),
    }
    readonly = np.empty_like(q)
    readonly.flags.writeable = False
    refusals[r"out \(type ndarray\) is not a writable array"] = readonly
    for message, out in refusals.items():
        before = np.array(q), np.array(v)
        with pytest.raises(ValueError, match=message):
            nystrom.attention(q, k, v, out=out)
        np.testing.assert_array_equal(q, before[0])
        np.testing.assert_array_equal(v, before[1])


@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_tensors_are_accepted(dtype):
    torch = pytest.importorskip("torch")
    q, k, v = qkv(dtype=dtype)
    tensors = [torch.from_numpy(x) for x in (q, k, v)]
    np.testing.assert_array_equal(nystrom.attention(*tensors, landmarks=6), nystrom.attention(q, k, v, landmarks=6))
    transposed = [torch.from_numpy(np.ascontiguousarray(x.T)).T for x in (q, k, v)]  # column-major tensors
    np.testing.assert_array_equal(nystrom.attention(*transposed, landmarks=6),
                                  nystrom.attention(*(np.asfortranarray(x) for x in (q, k, v)), landmarks=6))
    assert nystrom.kernel_matrix(tensors[0], tensors[1]).dtype == dtype
    out = torch.empty_like(tensors[2])
    assert nystrom.attention(*tensors, landmarks=6, out=out) is out
    np.testing.assert_array_equal(out.numpy(), nystrom.attention(q, k, v, landmarks=6))
    with pytest.raises(ValueError, match="out requires grad"):
        nystrom.attention(*tensors, landmarks=6, out=out.requires_grad_())


@pytest.mark.parametrize("dtype", DTYPES)
def test_float32_stays_float32_everywhere(dtype):
    q, k, v = qkv(dtype=dtype)
    factors = nystrom.nystrom_factors(q, k, landmarks=6)
    arrays = [nystrom.kernel_matrix(q, k), nystrom.attention_matrix(q, k), nystrom.attention(q, k, v),
              nystrom.attention(q[None], k[None], v[None]), nystrom.approximate(q, k, v).output, factors.left,
              factors.core, factors.upper, factors.z, factors.left_log_scale, factors.dense(), factors.apply(v),
              factors.attention(v), factors.pinv.z, factors.landmarks.q, nystrom.select_landmarks(q, k).k,
              nystrom.pseudoinverse(factors.core).z, nystrom.approximate(q, k, v).implied_attention()]
    assert all(array.dtype == dtype for array in arrays)


def test_factor_views_keep_their_owner_alive():
    q, k, _ = qkv()
    left = nystrom.nystrom_factors(q, k, landmarks=6, stabilization="none").left
    import gc
    gc.collect()
    assert relative(left, kernel_ref(q, segment_means_ref(k, 6))) < 1e-12
    assert not left.flags.writeable


# ---------------------------------------------------------------------------------------------------------------
# bad arguments

def test_bad_values_raise_value_error_naming_them():
    q, k, v = qkv(n=16)
    cases = [
        (dict(landmarks=17), "m = 17 exceeds"),
        (dict(landmarks=0), "m = 0"),
        (dict(kernel="laplacian", lambda_=0.0), "lambda = 0 must be > 0"),
        (dict(kernel="laplacian", lambda_=-2.0), "lambda = -2"),
        (dict(method="fast"), "unknown method 'fast'"),
        (dict(strategy="middle"), "unknown landmark strategy 'middle'"),
        (dict(pinv="qr"), "unknown pseudoinverse method 'qr'"),
        (dict(stabilization="max"), "unknown stabilization 'max'"),
        (dict(kernel="cosine"), "unknown kernel 'cosine'"),
        (dict(pinv="razavi", pinv_iters=0), "iterations = 0"),
        (dict(method="nystromformer", kernel="laplacian"), "softmax method"),
        (dict(method="cur", strategy="segment-means"), "segment-means"),
    ]
    for options, message in cases:
        with pytest.raises(ValueError, match=message):
            nystrom.attention(q, k, v, **options)
    with pytest.raises(ValueError, match="method 'performer' has no Nyström factors"):
        nystrom.nystrom_factors(q, k, method="performer")


def test_bad_arrays_raise_value_error_naming_them():
    q, k, v = qkv(n=16)
    nan = q.copy()
    nan[3, 2] = np.nan
    infinite = v.copy()
    infinite[0, 0] = np.inf
    cases = [
        ((nan, k, v), "Q contains non-finite"),
        ((q, k, infinite), "V contains non-finite"),
        ((q, k[:15], v), "k is 15x8 but q is 16x8"),
        ((q, k[:, :5], v), "k is 16x5 but q is 16x8"),
        ((q, k, v[:15]), "v has N = 15 rows but q has N = 16"),
        ((q[0], k, v), r"q has shape \(8,\)"),
        ((q[None], k, v[None]), "k has leading dimensions"),
        ((q.astype(np.int64), k, v), "q has dtype int64"),
        ((q, k.astype(np.float32), v), "k is float32 but q is float64"),
        ((q.astype(np.float16), k, v), "q is float16, k is float64, v is float64; pass arrays of one dtype"),
    ]
    for arrays, message in cases:
        with pytest.raises(ValueError, match=message):
            nystrom.attention(*arrays, landmarks=4)
    for method in ("pnp-nystra", "performer", "exact"):  # one head: the message names no head of a batch
        with pytest.raises(ValueError, match="^[^ ]+: Q contains non-finite") as raised:
            nystrom.attention(nan, k, v, method=method, landmarks=4)
        assert "head" not in str(raised.value), str(raised.value)
    with pytest.raises(ValueError, match="non-finite"):
        nystrom.kernel_matrix(nan, k)
    with pytest.raises(ValueError, match="non-finite"):
        nystrom.select_landmarks(nan, k)
    factors = nystrom.nystrom_factors(q, k, landmarks=4)
    with pytest.raises(ValueError, match="the factors are float64 but the arrays are float32"):
        nystrom.error_norm(q.astype(np.float32), k.astype(np.float32), factors)
    with pytest.raises(ValueError, match="16x16 kernel"):
        nystrom.error_norm(q[:10], k[:10], factors)


def test_bad_keywords_raise_type_error():
    q, k, v = qkv(n=16)
    with pytest.raises(TypeError, match="unexpected keyword argument 'landmark'"):
        nystrom.attention(q, k, v, landmark=4)
    with pytest.raises(TypeError, match="unexpected keyword argument 'features'"):
        nystrom.nystrom_factors(q, k, features=4)
    with pytest.raises(TypeError, match="landmarks = '4' is not int"):
        nystrom.attention(q, k, v, landmarks="4")


def test_sizes_too_large_to_allocate_raise_memory_error_saying_so():
    # Valid values whose matrices cannot be allocated (the N×r features, Linformer's k×N projection): nanobind's
    # MemoryError said only "std::bad_alloc".
    q, k, v = qkv(n=17)
    for options in ({"method": "performer", "features": 10**12}, {"method": "performer", "landmarks": 10**12},
                    {"method": "linformer", "projected": 10**12}):
        with pytest.raises(MemoryError, match="^out of memory: the sizes asked for need more memory"):
            nystrom.attention(q, k, v, **options)


# ---------------------------------------------------------------------------------------------------------------
# threads and the GIL

def test_two_python_threads_at_once_give_the_sequential_results():
    inputs = [qkv(n=256, d=16, dv=16, seed=10 * i) for i in range(4)]
    options = [dict(method="pnp-nystra", landmarks=16, pinv="razavi"), dict(method="exact"),
               dict(method="nystromformer", landmarks=8), dict(method="cur", landmarks=8, strategy="random")]
    sequential = [nystrom.attention(*x, **o) for x, o in zip(inputs, options)]
    results, errors = {}, []

    def work(worker):
        try:
            for repeat in range(5):
                for index in range(worker, len(inputs), 2):
                    results[(worker, repeat, index)] = nystrom.attention(*inputs[index], **options[index])
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    workers = [threading.Thread(target=work, args=(w,)) for w in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert not errors and len(results) == 2 * 5 * 2
    for (_, _, index), out in results.items():
        np.testing.assert_allclose(out, sequential[index], rtol=1e-12, atol=1e-14)


def test_long_calls_release_the_gil():
    q, k, v = qkv(n=3072, d=64, dv=64, seed=3)
    done = threading.Event()

    def compute():
        for _ in range(3):
            nystrom.attention(q, k, v, method="exact")
        done.set()

    worker = threading.Thread(target=compute)
    start = time.perf_counter()
    worker.start()
    python_steps = 0
    while not done.is_set():
        python_steps += 1
        time.sleep(0.0005)
    worker.join()
    elapsed = time.perf_counter() - start
    # With the GIL held for the whole call this loop could not run at all while the worker computes.
    assert python_steps > min(20, 0.1 * elapsed / 0.0005), (python_steps, elapsed)


def test_set_threads():
    before = nystrom.threads()
    q, k, v = qkv(n=512, d=16, dv=16)
    try:
        reference = nystrom.attention(q, k, v, landmarks=16)
        nystrom.set_threads(1)
        assert nystrom.threads() == 1
        results = []
        worker = threading.Thread(target=lambda: results.append(nystrom.attention(q, k, v, landmarks=16)))
        worker.start()
        worker.join()
        np.testing.assert_allclose(results[0], reference, rtol=1e-12)
        with pytest.raises(ValueError, match="threads = 0"):
            nystrom.set_threads(0)
    finally:
        nystrom.set_threads(before)
    assert nystrom.blas_core()


def test_results_are_the_same_bits_on_one_and_two_threads():
    """Every sum over N is added in a fixed order: outputs and norms do not depend on the thread count or the run."""
    before = nystrom.threads()
    q, k, v = qkv(n=1024, d=32, dv=32)
    factors = nystrom.nystrom_factors(q, k, landmarks=16)
    calls = {
        "attention": lambda: nystrom.attention(q, k, v, landmarks=16),
        "kernel_norm matrix-free": lambda: nystrom.kernel_norm(q, k, solver="matrix-free"),
        "error_norm matrix-free": lambda: nystrom.error_norm(q, k, factors, solver="matrix-free"),
        "error_norm lanczos": lambda: nystrom.error_norm(q, k, factors),
    }
    try:
        for name, call in calls.items():
            nystrom.set_threads(1)
            one = call()
            nystrom.set_threads(2)
            for _ in range(3):
                assert np.array_equal(call(), one), name
    finally:
        nystrom.set_threads(before)


# ---------------------------------------------------------------------------------------------------------------
# the module itself

def test_constants_name_every_choice():
    assert nystrom.METHODS == ("pnp-nystra", "nystromformer", "cur", "symmetric-nystrom", "performer", "linformer",
                               "exact")
    assert nystrom.KERNELS == ("exp", "laplacian", "gaussian")
    assert "segment-means" in nystrom.STRATEGIES and "kmeans" in nystrom.STRATEGIES
    assert nystrom.PINV_METHODS == ("exact", "razavi", "newton-schulz", "truncated", "oracle-core")
    assert nystrom.STABILIZATIONS == ("none", "row-max", "clamped", "row-sum")


def test_every_function_is_documented_and_typed():
    stub = Path(nystrom._nystrom.__file__).with_name("_nystrom.pyi")  # beside the extension, also when editable
    assert stub.is_file(), "the package ships the stub generated at build time"
    text = stub.read_text()
    for name in nystrom.__all__:
        assert getattr(nystrom, name).__doc__ or name.isupper(), name
        # The readers and the approximation objects are Python, not in the extension's stub.
        if not name.isupper() and getattr(nystrom, name).__module__ not in ("nystrom.results", "nystrom.estimators"):
            assert f"def {name}(" in text or f"class {name}" in text, name
    assert "landmarks: int = 16" in text and "lambda_: float = 4.0" in text
    assert (Path(nystrom.__file__).parent / "py.typed").is_file()


def test_read_results_returns_the_sweep_as_a_dataframe(tmp_path):
    subprocess.run([sys.executable, str(REPOSITORY / "tests/python/make_fake_results.py"), str(tmp_path),
                    "--methods", "pnp-nystra,performer"], check=True, capture_output=True)
    frame = nystrom.read_results(tmp_path / "sweep.h5")
    table = nystrom.results.read_sweep(tmp_path / "sweep.h5")
    assert len(frame) == table.rows and set(frame.columns) == set(table)
    assert frame["landmarks"].dtype == np.int64 and frame["spectral_error"].dtype == np.float64
    assert isinstance(frame["method"].iloc[0], str) and set(frame["method"]) == {"pnp-nystra", "performer"}
    assert frame.attrs["format"] == "nystrom-results" and frame.attrs["format_version"] == 4
    with pytest.raises(FileNotFoundError, match="no such results file"):
        nystrom.read_results(tmp_path / "absent.h5")
    (tmp_path / "text.h5").write_text("not HDF5\n")
    with pytest.raises(ValueError, match="text.h5: not a readable HDF5 file"):
        nystrom.read_results(tmp_path / "text.h5")
    with pytest.raises(ValueError, match="expected 'nystrom-results'"):
        nystrom.read_results(REPOSITORY / "data/minilm-gettysburg.h5")


# ---------------------------------------------------------------------------------------------------------------
# adversarial arguments: each case once gave a crash-free but wrong or unhelpful answer

@pytest.mark.parametrize("bad", (np.nan, np.inf))
def test_spectral_functions_name_non_finite_tokens_before_their_logits(bad):
    # A NaN or Inf token was blamed on the logits ("largest logit -inf is not finite: the exponents overflow") or
    # named as the library's X.
    q, k, _ = qkv(n=16)
    factors = nystrom.nystrom_factors(q, k, landmarks=4)
    bad_q = q.copy()
    bad_q[3, 2] = bad
    calls = {
        "landmark_terms": lambda: nystrom.landmark_terms(bad_q, k, factors),
        "error_norm": lambda: nystrom.error_norm(bad_q, k, factors, solver="matrix-free"),
        "error_singular_values": lambda: nystrom.error_singular_values(bad_q, k, factors, 2),
        "kernel_norm": lambda: nystrom.kernel_norm(bad_q, k),
        "kernel_singular_values": lambda: nystrom.kernel_singular_values(bad_q, k, 2),
    }
    for function, call in calls.items():
        with pytest.raises(ValueError, match=f"^{function}: q contains non-finite values"):
            call()
    with pytest.raises(ValueError, match="^kernel_singular_values: k contains non-finite values"):
        nystrom.kernel_singular_values(k, bad_q, 2)


def test_positional_integers_raise_as_keywords_do():
    # count, k and threads beyond their C++ type raised nanobind's TypeError "incompatible function arguments",
    # naming neither the argument nor its value.
    q, k, _ = qkv(n=16)
    factors = nystrom.nystrom_factors(q, k, landmarks=4)
    calls = {
        "top_singular_values(): count": lambda value: nystrom.top_singular_values(q, value),
        "kernel_singular_values(): count": lambda value: nystrom.kernel_singular_values(q, k, value),
        "error_singular_values(): count": lambda value: nystrom.error_singular_values(q, k, factors, value),
        "energy_fraction(): k": lambda value: nystrom.energy_fraction(np.ones(3), value),
        "set_threads(): threads": lambda value: nystrom.set_threads(value),
    }
    threads = nystrom.threads()
    try:
        for name, call in calls.items():
            for value in (2**64, -2**63 - 1):
                with pytest.raises(ValueError, match=rf"^{re.escape(name)} = {value} is out of range"):
                    call(value)
            with pytest.raises(TypeError, match=rf"^{re.escape(name)} = 2.0 is not int"):
                call(2.0)
        with pytest.raises(ValueError, match=r"^set_threads\(\): threads = 1099511627776 is out of range"):
            nystrom.set_threads(2**40)
        assert nystrom.top_singular_values(q, np.int64(2)).values.shape == (2,)
        assert nystrom.energy_fraction(np.ones(4), k=2) == 0.5
        nystrom.set_threads(threads=1)
        assert nystrom.threads() == 1
    finally:
        nystrom.set_threads(threads)


def test_torch_tensors_with_the_negative_bit_are_read_with_their_sign():
    # torch's lazy negation (c.conj().imag) reaches DLPack as the un-negated memory: the result was that of -q.
    torch = pytest.importorskip("torch")
    q, k, v = (torch.from_numpy(array) for array in qkv(n=16))
    negated = torch.complex(torch.zeros_like(q), -q).conj().imag  # equals q, stored as -q with the negative bit
    assert negated.is_neg() and torch.equal(negated, q)
    for method in ("pnp-nystra", "exact"):
        np.testing.assert_array_equal(nystrom.attention(negated, k, v, method=method, landmarks=4),
                                      nystrom.attention(q, k, v, method=method, landmarks=4))
    assert nystrom.kernel_norm(negated, k) == nystrom.kernel_norm(q, k)
    out = torch.complex(torch.zeros(16, 6, dtype=torch.float64), torch.zeros(16, 6, dtype=torch.float64)).conj().imag
    assert out.is_neg()
    with pytest.raises(ValueError, match="out has torch's negative bit set"):
        nystrom.attention(q, k, v, landmarks=4, out=out)


def test_results_readers_reject_malformed_files_naming_what(tmp_path):
    # A format_version of text, NaN or no element raised int()'s or numpy's own error naming no file, 2.7 was read as
    # version 2; a dataset where a group belongs raised AttributeError; a directory was "no such results file".
    import h5py

    def results_file(name, version=3, **datasets):
        path = tmp_path / f"{name}.h5"
        with h5py.File(path, "w") as file:
            file.attrs["format"] = "nystrom-results"
            file.attrs["format_version"] = version
            for key, value in datasets.items():
                file.create_dataset(key.replace("__", "/"), data=value)
        return path

    for version in ("abc", np.nan, 2.7, np.zeros(0), np.array([True])):
        path = results_file("version", version)
        for read in (nystrom.read_results, nystrom.read_bench, nystrom.read_spectra, nystrom.read_vision):
            with pytest.raises(ValueError, match=r"version\.h5: unknown format_version"):
                read(path)
    assert nystrom.results.attributes(results_file("float_version", 3.0))["format_version"] == 3.0
    with pytest.raises(IsADirectoryError, match="is a directory"):
        nystrom.read_results(tmp_path)
    path = results_file("datasets", sweep=[1.0], bench=[1.0], spectra=[1.0], vision=[1.0])
    for read, name in ((nystrom.read_results, "sweep"), (nystrom.read_bench, "bench"),
                       (nystrom.read_spectra, "spectra")):
        with pytest.raises(ValueError, match=f"datasets.h5: /{name} is a Dataset, expected a group"):
            read(path)
    with pytest.raises(ValueError, match="/spectra/layer0 is a Dataset, expected a group"):
        nystrom.read_spectra(results_file("layer", spectra__layer0=[1.0]))


@pytest.mark.parametrize("method", ("exact", "performer", "linformer"))
def test_every_method_warns_of_output_rows_that_are_not_finite(method):
    # A float32 scale whose logits overflow float32 (or whose own value does) gave NaN outputs without a word for
    # the methods other than PnP-Nystra and symmetric Nyström.
    q, k, v = (x[None] for x in qkv(n=16, dtype=np.float32))
    with pytest.warns(RuntimeWarning, match=rf"attention: {method} gave \d+ of 16 output rows that are not finite: "
                                            r".*overflow or vanish in the arrays' dtype"):
        out = nystrom.attention(q, k, v, method=method, scale=1e300, landmarks=4)
    assert not np.isfinite(out).all()
    # approximate() returns the same output with the rest of the approximation, and warns alike.
    with pytest.warns(RuntimeWarning, match=rf"approximate: {method} gave \d+ of 16 output rows that are not "
                                            r"finite: .*overflow or vanish"):
        approximation = nystrom.approximate(q[0], k[0], v[0], method=method, scale=1e300, landmarks=4)
    np.testing.assert_array_equal(approximation.output, out[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isfinite(nystrom.attention(q, k, v, method=method, landmarks=4)).all()
        assert np.isfinite(nystrom.approximate(q[0], k[0], v[0], method=method, landmarks=4).output).all()


@pytest.mark.parametrize("solver", ("matrix-free", "lanczos"))
def test_a_norm_whose_lanczos_run_stops_short_warns(solver):
    # kernel_norm and error_norm return σ₁ alone. Where Lanczos stopped before its tolerance (here one restart
    # of a 3-vector basis), Spectra returns no value and the NaN came back without a word.
    rng = np.random.default_rng(5)
    q, k = (rng.standard_normal((2048, 16)) for _ in range(2))
    factors = nystrom.nystrom_factors(q, k, landmarks=8)
    short = {"solver": solver, "max_restarts": 1, "subspace": 3}
    norms = {"kernel_norm": lambda **options: nystrom.kernel_norm(q, k, **options),
             "error_norm": lambda **options: nystrom.error_norm(q, k, factors, **options)}
    for name, norm in norms.items():
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            dense = norm(solver="dense")
            assert norm(solver=solver) == pytest.approx(dense, rel=1e-12)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = norm(**short)
        if np.isnan(value):
            assert len(caught) == 1 and caught[0].category is RuntimeWarning
            assert re.search(rf"{name}: Lanczos did not reach spectral_tolerance = 1e-13 within max_restarts = 1 "
                             r"\(subspace = 3\), so the norm is NaN", str(caught[0].message))
        else:  # a run that converged in one restart gives the norm, and no warning
            assert not caught and value == pytest.approx(dense, rel=1e-10)
    with pytest.warns(RuntimeWarning, match="kernel_norm: Lanczos did not reach"):
        assert np.isnan(nystrom.kernel_norm(q, k, solver="matrix-free", max_restarts=1, subspace=3))


def test_a_big_endian_out_is_refused_saying_so():
    # nanobind takes no array of the other byte order: the message said only "not a writable array".
    q, k, v = qkv(n=16)
    with pytest.raises(ValueError, match="not a writable array .*big-endian ones are not"):
        nystrom.attention(q, k, v, landmarks=4, out=np.empty((16, 6), dtype=">f8"))


def test_an_n_by_n_result_beyond_the_address_space_raises_memory_error():
    # 2³¹ float32 tokens (zero pages, never written) give a 2³¹×2³¹ G of 2⁶⁴ bytes: the size wrapped to 0 and the
    # kernel was written past a 0-byte allocation (a segmentation fault). Run in a child: the fault kills it.
    script = """
import numpy as np, nystrom
try:
    x = np.zeros((2**31, 1), np.float32, order="F")
except MemoryError:
    raise SystemExit(77)
for function in (nystrom.kernel_matrix, nystrom.attention_matrix):
    try:
        function(x, x)
    except MemoryError as error:
        print(function.__name__, error)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    if done.returncode == 77:
        pytest.skip("no address space for 8 GiB of zero pages")
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    for function in ("kernel_matrix", "attention_matrix"):
        assert f"{function} out of memory: the sizes asked for need more memory" in done.stdout, done.stdout


def test_a_window_whose_area_overflows_is_refused():
    # h·w wrapped around in the library's check (2⁶³−1 × 2⁶³−1 is 1, 3 × 6148914691236517206 is 2): the window
    # passed for the N-token grid and window-pool read far outside the tokens (a segmentation fault). Run in a
    # child: the fault kills it.
    script = """
import numpy as np, nystrom
for n, window in ((1, (2**63 - 1, 2**63 - 1)), (2, (3, 6148914691236517206))):
    q = np.ones((n, 4))
    for call in (lambda: nystrom.attention(q, q, q, strategy="window-pool", landmarks=1, window=window),
                 lambda: nystrom.select_landmarks(q, q, strategy="window-pool", landmarks=1, window=window),
                 lambda: nystrom.evaluate(q, q, q, strategy="window-pool", landmarks=1, window=window)):
        try:
            call()
        except ValueError as error:
            print(error)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    lines = done.stdout.splitlines()
    # The library decides h·w = N by division (landmarks.hpp, window_holds).
    windows = [f"window {2**63 - 1}x{2**63 - 1} does not hold"] * 3 + ["window 3x6148914691236517206 does not hold"] * 3
    assert len(lines) == 6 and all(window in line for window, line in zip(windows, lines)), lines


def test_arrays_dlpack_cannot_carry_raise_value_error_naming_them():
    # Object, text and long-double arrays were refused as "incompatible function arguments" (a TypeError naming no
    # argument); ragged lists raised numpy's own message, naming none either.
    q, k, v = qkv(n=16)
    for bad in (q.astype(object), q.astype(np.longdouble), q.astype(str), q.astype([("a", "f8")])):
        with pytest.raises(ValueError, match=f"^k has dtype {re.escape(str(bad.dtype))}; expected float32 or float64"):
            nystrom.attention(q, bad, v, landmarks=4)
    with pytest.raises(ValueError, match="^v has dtype object"):
        nystrom.evaluate(q, k, v=v.astype(object), landmarks=4)
    with pytest.raises(ValueError, match="^bias has dtype object"):
        nystrom.evaluate(q, k, v, np.zeros((16, 16), dtype=object), landmarks=4)
    with pytest.raises(ValueError, match="^x has dtype object"):
        nystrom.nystrom_factors(q, k, landmarks=4).apply(np.ones(16, dtype=object))
    with pytest.raises(ValueError, match="^singular_values is not an array of numbers: "):
        nystrom.numerical_rank([[1.0, 2.0], [3.0]])
    assert nystrom.top_singular_values(q.tolist(), 2).values.shape == (2,)  # nested lists still read as float64
