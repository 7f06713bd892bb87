"""The module's `precision` keyword (docs/mathematics.md §8): float16 and bfloat16 arrays and tensors computed in the
emulated format with results in their dtype, named formats converting the arrays, and the errors of each format
against the float64 exact output."""

import numpy as np
import pytest

import nystrom

torch = pytest.importorskip("torch")


def tokens(n=96, d=16, dv=8, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    return (scale * rng.standard_normal((n, d)), scale * rng.standard_normal((n, d)), rng.standard_normal((n, dv)))


def relative_error(approximate, exact):
    approximate = np.asarray(approximate, dtype=np.float64)
    return np.linalg.norm(approximate - exact) / np.linalg.norm(exact)


@pytest.mark.parametrize("method", ["exact", "pnp-nystra", "nystromformer", "performer"])
def test_float16_arrays_are_computed_in_half_and_returned_as_float16(method):
    q, k, v = (x.astype(np.float16) for x in tokens())
    out = nystrom.attention(q, k, v, method=method, landmarks=8)
    named = nystrom.attention(*(x.astype(np.float32) for x in (q, k, v)), method=method, landmarks=8,
                              precision="half")
    assert out.dtype == np.float16 and named.dtype == np.float32
    np.testing.assert_array_equal(out, named.astype(np.float16))


def test_bfloat16_tensors_are_computed_in_bfloat16_and_returned_as_bfloat16():
    q, k, v = (torch.from_numpy(x).to(torch.bfloat16) for x in tokens(seed=1))
    out = nystrom.attention(q, k, v, method="pnp-nystra", landmarks=8)
    named = nystrom.attention(*(x.float() for x in (q, k, v)), method="pnp-nystra", landmarks=8, precision="bf16")
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16 and named.dtype == np.float32
    assert torch.equal(out, torch.from_numpy(named).to(torch.bfloat16))


def test_exact_attention_loses_the_formats_precision_against_float64():
    q, k, v = tokens(seed=2)
    exact = nystrom.attention(q, k, v, method="exact")
    errors = {precision: relative_error(nystrom.attention(q, k, v, method="exact", precision=precision), exact)
              for precision in ("double", "float", "half", "bfloat16")}
    assert errors["double"] < 1e-14
    assert 1e-9 < errors["float"] < 1e-6
    # A unit roundoff 2⁻¹¹ (half) and 2⁻⁸ (bfloat16), grown by the sums over N and d.
    assert 2 ** -14 < errors["half"] < 2 ** -7
    assert 4 * errors["half"] < errors["bfloat16"] < 2 ** -4


def test_float64_arrays_with_an_emulated_precision_keep_their_dtype():
    q, k, v = tokens(seed=3)
    out = nystrom.attention(q, k, v, method="exact", precision="half")
    assert out.dtype == np.float64
    # The values are half-precision results: rounding them to float16 changes nothing.
    np.testing.assert_array_equal(out.astype(np.float16).astype(np.float64), out)


def test_evaluate_measures_an_emulated_point_against_the_float64_exact_output():
    q, k, v = (x.astype(np.float32) for x in tokens(seed=4))
    row = nystrom.evaluate(q, k, v, method="exact", precision="half")
    assert row["precision"] == "half" and row["nonfinite_output_rows"] == 0
    exact = nystrom.attention(*(x.astype(np.float64) for x in (q, k, v)), method="exact")
    computed = nystrom.attention(q, k, v, method="exact", precision="half")
    assert row["output_relative_error"] == pytest.approx(relative_error(computed, exact), rel=1e-9)
    native = nystrom.evaluate(q, k, v, method="pnp-nystra", landmarks=8)
    assert native["precision"] == "float" and native["overflowed_entries"] == 0


def test_logits_beyond_halfs_exp_range_overflow_pnp_nystra_but_not_the_sweeps_log_shifted_kernel():
    # exp overflows float16 above a logit of 11.09: PnP-Nystra's blocks exp(s q kᵀ) become Inf, and every output row
    # is NaN with a RuntimeWarning, row-max scaling or not (the core's logits are not scaled); exact attention
    # subtracts each row's largest logit first. evaluate(), as a sweep, computes with the head's log-shift c
    # (κ_c = e^{-c} κ, docs/mathematics.md §7), whose largest entry is 1: no overflow there.
    q, k, v = (x.astype(np.float32) for x in tokens(seed=5, scale=4.0))
    assert (q @ k.T / 4).max() > 11.09
    for stabilization in ("none", "row-max"):
        with pytest.warns(RuntimeWarning, match="not finite"):
            out = nystrom.attention(q, k, v, method="pnp-nystra", landmarks=8, stabilization=stabilization,
                                    precision="half")
        assert not np.isfinite(out).any()
    assert np.isfinite(nystrom.attention(q, k, v, method="exact", precision="half")).all()
    row = nystrom.evaluate(q, k, v, method="pnp-nystra", landmarks=8, stabilization="none", precision="half")
    assert row["overflowed_entries"] == 0 and row["log_shift"] > 11.09


def test_bad_precisions_are_value_errors_naming_them():
    q, k, v = tokens(seed=6)
    with pytest.raises(ValueError, match="quarter"):
        nystrom.attention(q, k, v, precision="quarter")
    with pytest.raises(ValueError, match="q is float16, k is bfloat16, v is float16; pass arrays of one dtype"):
        nystrom.attention(q.astype(np.float16), torch.from_numpy(k).to(torch.bfloat16), v.astype(np.float16))


def test_nystrom_torch_computes_half_and_bfloat16_tensors_in_their_format():
    import nystrom.torch as nt
    for dtype, precision in ((torch.float16, "half"), (torch.bfloat16, "bfloat16")):
        q, k, v = (torch.from_numpy(x).to(dtype) for x in tokens(seed=7))
        out = nt.attention(q, k, v, method="pnp-nystra", landmarks=8)
        named = nystrom.attention(*(x.float() for x in (q, k, v)), method="pnp-nystra", landmarks=8,
                                  precision=precision)
        assert out.dtype == dtype
        assert torch.equal(out, torch.from_numpy(np.asarray(named)).to(dtype))
