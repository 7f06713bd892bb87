"""Tests of the module's approximation objects (python/nystrom/estimators.py): each object's output is the output of
the functions with the same keywords bit for bit, in float32 and float64; fit keeps the factors and landmarks and a
refit replaces them; get_params/set_params in scikit-learn's style; unknown keywords and use before fit raise; the
docstrings' examples run."""

from __future__ import annotations

import doctest
import re

import numpy as np
import pytest

import nystrom
import nystrom.estimators

DTYPES = (np.float32, np.float64)
# Every object with keywords that move it off its defaults.
NYSTROM_CASES = [
    (nystrom.PnPNystra, dict(landmarks=16, pinv="razavi", pinv_iters=6)),
    (nystrom.PnPNystra, dict(landmarks=8, strategy="random", seed=3, stabilization="clamped")),
    (nystrom.PnPNystra, dict(landmarks=12, kernel="laplacian", lambda_=2.0)),
    (nystrom.SymmetricNystrom, dict(landmarks=8, kernel="laplacian")),
]
OTHER_CASES = [
    (nystrom.Nystromformer, dict(landmarks=10, front_padding=True)),
    (nystrom.Cur, dict(landmarks=8, copy_rows=True)),
    (nystrom.Performer, dict(features=16, seed=2)),
    (nystrom.Linformer, dict(projected=16, share_projections=True)),
]


def qkv(dtype=np.float64, seed=0, n=64, d=8):
    return tuple(np.random.default_rng(seed).standard_normal((3, n, d)).astype(dtype))


def signature_keywords(function) -> set[str]:
    """The keyword-only parameters of an extension function, from its signature line (independently of the
    module's own reading of it)."""
    keywords = function.__doc__.split("\n", 1)[0].split("*,", 1)[1]
    return set(re.findall(r"(\w+): [^=]+? = ", keywords))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cls, keywords", NYSTROM_CASES)
def test_nystrom_objects_give_the_functions_output_bit_for_bit(dtype, cls, keywords):
    q, k, v = qkv(dtype)
    out = cls(**keywords).fit(q, k).attention(v)
    assert out.dtype == dtype
    assert np.array_equal(out, nystrom.approximate(q, k, v, method=cls.method, **keywords).output)
    assert np.array_equal(out, nystrom.nystrom_factors(q, k, method=cls.method, **keywords).attention(v))
    # nystrom.attention on C-contiguous batches runs the row-major path (lib/include/nystrom/batched.hpp), whose
    # products round differently in float32.
    np.testing.assert_allclose(out, nystrom.attention(q, k, v, method=cls.method, **keywords),
                               rtol=1e-4 if dtype == np.float32 else 1e-12, atol=1e-5 if dtype == np.float32 else 0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cls, keywords", OTHER_CASES)
def test_other_objects_give_the_functions_output_bit_for_bit(dtype, cls, keywords):
    q, k, v = qkv(dtype)
    out = cls(**keywords).fit(q, k).attention(v)
    assert out.dtype == dtype
    assert np.array_equal(out, nystrom.attention(q, k, v, method=cls.method, **keywords))


@pytest.mark.parametrize("cls, keywords", NYSTROM_CASES[:1] + OTHER_CASES[:1])
def test_torch_tensors_are_taken_as_the_functions_take_them(cls, keywords):
    torch = pytest.importorskip("torch")
    q, k, v = qkv(np.float32)
    tensors = [torch.from_numpy(x) for x in (q, k, v)]
    out = cls(**keywords).fit(*tensors[:2]).attention(tensors[2])
    assert np.array_equal(out, cls(**keywords).fit(q, k).attention(v))


def test_fit_keeps_the_factors_and_landmarks():
    q, k, _ = qkv()
    keywords = dict(landmarks=8, strategy="random", seed=5)
    model = nystrom.PnPNystra(**keywords)
    assert not hasattr(model, "factors_") and not hasattr(model, "landmarks_")
    assert model.fit(q, k) is model
    factors = nystrom.nystrom_factors(q, k, **keywords)
    assert isinstance(model.factors_, nystrom.NystromFactors) and model.factors_.shape == (64, 64)
    for block in ("left", "core", "upper", "z"):
        assert np.array_equal(getattr(model.factors_, block), getattr(factors, block))
    landmarks = nystrom.select_landmarks(q, k, **keywords)
    assert isinstance(model.landmarks_, nystrom.Landmarks)
    for part in ("q", "k", "q_indices", "k_indices"):
        assert np.array_equal(getattr(model.landmarks_, part), getattr(landmarks, part))


def test_error_norm_is_the_functions():
    q, k, _ = qkv()
    model = nystrom.PnPNystra(landmarks=8).fit(q, k)
    assert model.error_norm() == nystrom.error_norm(q, k, model.factors_)
    assert model.error_norm(solver="dense") == nystrom.error_norm(q, k, model.factors_, solver="dense")
    with pytest.raises(TypeError, match="bogus"):
        model.error_norm(bogus=1)


def test_refit_replaces_the_fit():
    q, k, _ = qkv(seed=0)
    q2, k2, v2 = qkv(seed=1)
    model = nystrom.PnPNystra(landmarks=8).fit(q, k)
    factors, landmarks = model.factors_, model.landmarks_
    model.fit(q2, k2)
    assert not np.array_equal(model.factors_.left, factors.left)
    assert not np.array_equal(model.landmarks_.q, landmarks.q)
    assert np.array_equal(model.attention(v2), nystrom.approximate(q2, k2, v2, landmarks=8).output)
    assert model.error_norm() == nystrom.error_norm(q2, k2, model.factors_)
    other = nystrom.Performer(features=8).fit(q, k).fit(q2, k2)
    assert np.array_equal(other.attention(v2), nystrom.attention(q2, k2, v2, method="performer", features=8))


def test_a_bad_value_raises_at_fit_and_keeps_the_previous_fit():
    q, k, v = qkv()
    model = nystrom.PnPNystra(landmarks=8).fit(q, k)
    out = model.attention(v)
    with pytest.raises(ValueError):
        model.set_params(landmarks=65).fit(q, k)
    assert np.array_equal(model.attention(v), out)


@pytest.mark.parametrize("cls, function", [(nystrom.PnPNystra, nystrom.nystrom_factors),
                                           (nystrom.SymmetricNystrom, nystrom.nystrom_factors),
                                           (nystrom.Nystromformer, nystrom.attention), (nystrom.Cur, nystrom.attention),
                                           (nystrom.Performer, nystrom.attention),
                                           (nystrom.Linformer, nystrom.attention)])
def test_the_keywords_are_those_of_the_function_called(cls, function):
    assert set(cls().get_params()) == signature_keywords(function) - {"method", "out"}


def test_get_params_and_set_params_round_trip():
    q, k, v = qkv()
    model = nystrom.PnPNystra(landmarks=8, pinv="razavi", pinv_iters=6)
    params = model.get_params()
    assert params["landmarks"] == 8 and params["pinv"] == "razavi" and params["stabilization"] is None
    params["landmarks"] = 12  # a copy: the object is unchanged
    assert model.get_params()["landmarks"] == 8
    clone = nystrom.PnPNystra(**model.get_params())
    assert clone.get_params() == model.get_params() and repr(clone) == repr(model)
    assert np.array_equal(clone.fit(q, k).attention(v), model.fit(q, k).attention(v))
    assert model.set_params(landmarks=16, strategy="step") is model
    assert model.get_params() == {**clone.get_params(), "landmarks": 16, "strategy": "step"}
    # The fit stays that of the keywords it was made with until fit is called again.
    assert np.array_equal(model.attention(v), clone.attention(v))
    assert np.array_equal(model.fit(q, k).attention(v),
                          nystrom.approximate(q, k, v, landmarks=16, strategy="step", pinv="razavi",
                                              pinv_iters=6).output)
    performer = nystrom.Performer(features=8).fit(q, k)
    before = performer.attention(v)
    assert np.array_equal(performer.set_params(features=16).attention(v), before)


def test_repr_shows_the_keywords_off_their_defaults():
    assert repr(nystrom.PnPNystra()) == "PnPNystra()"
    assert repr(nystrom.PnPNystra(landmarks=16, pinv="razavi", pinv_iters=6)) == \
        "PnPNystra(pinv='razavi', pinv_iters=6)"
    assert repr(nystrom.Cur(landmarks=8, forced=[0])) == "Cur(landmarks=8, forced=[0])"


def test_scikit_learn_clones_them():
    base = pytest.importorskip("sklearn.base")
    model = nystrom.Linformer(projected=8, seed=4)
    clone = base.clone(model)
    assert type(clone) is nystrom.Linformer and clone.get_params() == model.get_params()


@pytest.mark.parametrize("cls, keyword", [(nystrom.PnPNystra, "landmarkz"), (nystrom.PnPNystra, "method"),
                                          (nystrom.PnPNystra, "features"), (nystrom.PnPNystra, "iterations"),
                                          (nystrom.Performer, "out"), (nystrom.Linformer, "solver")])
def test_unknown_keywords_raise_naming_them(cls, keyword):
    with pytest.raises(ValueError, match=f"unknown keyword '{keyword}'"):
        cls(**{keyword: 1})
    with pytest.raises(ValueError, match=f"'{keyword}'"):
        cls().set_params(landmarks=8, **{keyword: 1})


def test_unknown_keywords_are_all_named():
    with pytest.raises(ValueError, match="unknown keywords 'bar', 'foo'"):
        nystrom.Cur(foo=1, bar=2, landmarks=8)


@pytest.mark.parametrize("cls", [nystrom.PnPNystra, nystrom.Cur])
def test_use_before_fit_raises(cls):
    _, _, v = qkv()
    with pytest.raises(nystrom.NotFittedError, match=f"{cls.__name__} is not fitted"):
        cls().attention(v)
    assert issubclass(nystrom.NotFittedError, ValueError)


def test_error_norm_before_fit_raises():
    with pytest.raises(nystrom.NotFittedError, match="fit"):
        nystrom.SymmetricNystrom().error_norm()


def test_the_docstrings_examples_run():
    result = doctest.testmod(nystrom.estimators, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
