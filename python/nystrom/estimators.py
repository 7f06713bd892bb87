"""The approximations as objects, in scikit-learn's style: constructed with the keywords of the module's functions,
fitted on the queries and keys of a head, applied to values.

    import numpy as np, nystrom
    q, k, v = np.random.default_rng(0).standard_normal((3, 256, 32))
    model = nystrom.PnPNystra(landmarks=16, pinv="razavi", pinv_iters=6).fit(q, k)   # landmarks, G_L, G_A, G_U, Z
    out = model.attention(v)                       # PnP-Nystra Algorithm 1: Ô = (Ĝ V) ⊘ (Ĝ 1_N)
    model.error_norm()                             # ‖G − Ĝ‖₂, the left side of Lemma 2.1

PnPNystra and SymmetricNystrom keep their Nyström factors (`nystrom_factors`) and apply them to any values;
Nystromformer, Cur, Performer and Linformer, whose factors the module does not expose, keep q and k and compute
`nystrom.attention` on each call. The keywords an object takes are those of the function it calls, read from that
function's signature.
"""

from __future__ import annotations

import ast

from . import attention, error_norm, nystrom_factors


def _keyword_defaults(function) -> dict:
    """The keyword-only parameters of an extension function but `method` and `out`, with their defaults, read from
    its signature (the first line of its docstring, which the extension writes from its table of keywords)."""
    header = function.__doc__.partition("\n")[0]
    signature = ast.parse(f"def {header}: pass").body[0].args
    return {parameter.arg: ast.literal_eval(default)
            for parameter, default in zip(signature.kwonlyargs, signature.kw_defaults)
            if parameter.arg not in ("method", "out")}


def _is_default(value, default) -> bool:
    """Whether `value` is the default itself (the same type and equal), without comparing arrays elementwise."""
    return type(value) is type(default) and value == default


class NotFittedError(ValueError, AttributeError):
    """An approximation object used before `fit` (as scikit-learn's NotFittedError: a ValueError and an
    AttributeError)."""


class _Estimator:
    """An approximation of `nystrom.attention` (`method`) with its keywords, fitted on q and k.

    Subclasses set `method` and `_defaults`, the keywords of the function they call with their defaults.
    """

    method: str
    _defaults = _keyword_defaults(attention)

    def __init__(self, **keywords):
        self._parameters = dict(self._defaults)
        self._fitted = None
        self.set_params(**keywords)

    def get_params(self, deep: bool = True) -> dict:
        """Every keyword with its value, the defaults included (scikit-learn's `get_params`).

        Parameters
        ----------
        deep : bool
            Ignored: scikit-learn's signature (no keyword holds an estimator).

        Returns
        -------
        dict
            Keyword to value; ``type(model)(**model.get_params())`` is the same approximation.

        Examples
        --------
        >>> import nystrom
        >>> params = nystrom.PnPNystra(landmarks=8).get_params()
        >>> params["landmarks"], params["pinv"]
        (8, None)
        """
        return dict(self._parameters)

    def set_params(self, **keywords) -> _Estimator:
        """Sets keywords (scikit-learn's `set_params`); the fit, if any, stays that of the keywords it was made
        with until `fit` is called again.

        Parameters
        ----------
        **keywords
            Keywords of the function the object calls (`get_params()` lists them).

        Returns
        -------
        self

        Raises
        ------
        ValueError
            Naming the keywords the function does not take (values are checked by `fit`).

        Examples
        --------
        >>> import nystrom
        >>> nystrom.PnPNystra().set_params(landmarks=32, pinv="razavi")
        PnPNystra(landmarks=32, pinv='razavi')
        """
        unknown = sorted(set(keywords) - set(self._defaults))
        if unknown:
            raise ValueError(f"{type(self).__name__}: unknown keyword{'s' * (len(unknown) > 1)} "
                             f"{', '.join(map(repr, unknown))}; expected one of {', '.join(self._defaults)}")
        self._parameters.update(keywords)
        return self

    def _changed(self) -> dict:
        """The keywords whose values are not the defaults: what the object passes to the functions."""
        return {name: value for name, value in self._parameters.items()
                if not _is_default(value, self._defaults[name])}

    def __repr__(self) -> str:
        keywords = ", ".join(f"{name}={value!r}" for name, value in self._changed().items())
        return f"{type(self).__name__}({keywords})"

    def _fit_state(self) -> tuple:
        """(q, k, keywords) of the last fit; raises NotFittedError before the first."""
        if self._fitted is None:
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet: call fit(q, k) first")
        return self._fitted

    def fit(self, q, k) -> _Estimator:
        """Fits the approximation to the queries and keys of a head: keeps them with the keywords, for `attention`
        to compute the method on each call (which checks the keywords' values).

        Parameters
        ----------
        q, k : array_like
            Queries and keys, N×d, float32 or float64 (numpy arrays, CPU torch tensors, nested lists), as the
            functions take them. They are kept by reference: modifying them afterwards changes later results.

        Returns
        -------
        self

        Examples
        --------
        >>> import numpy as np, nystrom
        >>> q, k, v = np.random.default_rng(0).standard_normal((3, 64, 8))
        >>> nystrom.Nystromformer(landmarks=8).fit(q, k).attention(v).shape
        (64, 8)
        """
        self._fitted = (q, k, self._changed())
        return self

    def attention(self, v):
        """The approximate attention output Ô for the fitted q, k and values v: `nystrom.attention(q, k, v,
        method=..., **keywords)` with the keywords of the fit.

        Parameters
        ----------
        v : array_like
            Values, N×dv, of the dtype of q.

        Returns
        -------
        numpy.ndarray
            Ô, N×dv, of the dtype of q.

        Raises
        ------
        NotFittedError
            Before `fit`.

        Examples
        --------
        >>> import numpy as np, nystrom
        >>> q, k, v = np.random.default_rng(0).standard_normal((3, 64, 8))
        >>> model = nystrom.Performer(features=16).fit(q, k)
        >>> np.array_equal(model.attention(v), nystrom.attention(q, k, v, method="performer", features=16))
        True
        """
        q, k, keywords = self._fit_state()
        return attention(q, k, v, method=self.method, **keywords)


class _NystromEstimator(_Estimator):
    """An approximation by Nyström factors Ĝ ≈ G = κ(Q, K) (`nystrom_factors`), computed once by `fit` and applied
    to any values."""

    _defaults = _keyword_defaults(nystrom_factors)

    def fit(self, q, k) -> _NystromEstimator:
        """Selects the landmarks and computes the Nyström factors of G = κ(Q, K) (`nystrom.nystrom_factors`).

        Parameters
        ----------
        q, k : array_like
            Queries and keys, N×d, float32 or float64 (numpy arrays, CPU torch tensors, nested lists). They are
            kept by reference for `error_norm`.

        Returns
        -------
        self
            With `factors_` and `landmarks_` set.

        Raises
        ------
        ValueError
            Naming a bad keyword value or input (m > N, an unknown strategy, ...); the previous fit is kept.

        Examples
        --------
        >>> import numpy as np, nystrom
        >>> q, k = np.random.default_rng(0).standard_normal((2, 64, 8))
        >>> model = nystrom.PnPNystra(landmarks=8, strategy="step").fit(q, k)
        >>> model.landmarks_.q_indices.tolist()
        [0, 8, 16, 24, 32, 40, 48, 56]
        >>> model.factors_.left.shape, model.factors_.z.shape
        ((64, 8), (8, 8))
        """
        factors = nystrom_factors(q, k, method=self.method, **self._changed())
        super().fit(q, k)
        self.factors_, self.landmarks_ = factors, factors.landmarks
        return self

    def attention(self, v):
        """The approximate attention output Ô = (Ĝ V) ⊘ (Ĝ 1_N) of the fitted factors (PnP-Nystra Algorithm 1),
        O(Nm(d + dv)) without forming Ĝ: `factors_.attention(v)`, the output of `nystrom.approximate` with the
        same keywords bit for bit.

        Parameters
        ----------
        v : array_like
            Values, N×dv, of the dtype of q.

        Returns
        -------
        numpy.ndarray
            Ô, N×dv, of the dtype of q.

        Raises
        ------
        NotFittedError
            Before `fit`.

        Examples
        --------
        >>> import numpy as np, nystrom
        >>> q, k, v = np.random.default_rng(0).standard_normal((3, 64, 8))
        >>> out = nystrom.PnPNystra(landmarks=8).fit(q, k).attention(v)
        >>> np.array_equal(out, nystrom.approximate(q, k, v, landmarks=8).output)
        True
        """
        self._fit_state()
        return self.factors_.attention(v)

    def error_norm(self, **keywords) -> float:
        """The spectral error ‖G − Ĝ‖₂ of the fitted factors (`nystrom.error_norm`): the left side of PnP-Nystra
        Lemma 2.1.

        Parameters
        ----------
        **keywords
            The keywords of `nystrom.error_norm`: solver ('lanczos', 'dense' or 'matrix-free'), subspace,
            max_restarts, spectral_tolerance, panel_rows.

        Returns
        -------
        float
            ‖G − Ĝ‖₂ (NaN, with a RuntimeWarning, where Lanczos stops short of its tolerance).

        Raises
        ------
        NotFittedError
            Before `fit`.

        Examples
        --------
        >>> import numpy as np, nystrom
        >>> q, k = np.random.default_rng(0).standard_normal((2, 64, 8))
        >>> model = nystrom.PnPNystra(landmarks=64).fit(q, k)
        >>> bool(model.error_norm(solver="dense") < 1e-9 * np.linalg.norm(nystrom.kernel_matrix(q, k), 2))
        True
        """
        q, k, _ = self._fit_state()
        return error_norm(q, k, self.factors_, **keywords)


class PnPNystra(_NystromEstimator):
    """PnP-Nystra: the generalized Nyström approximation Ĝ = G_L G_A⁺ G_U of G = κ(Q, K) on m landmarks, fitted on
    q and k, and its attention output Ô = (Ĝ V) ⊘ (Ĝ 1_N) (PnP-Nystra Algorithm 1) on any values.

    Parameters
    ----------
    **keywords
        The keywords of `nystrom.nystrom_factors` but `method`, with its defaults (`help(nystrom.nystrom_factors)`):
        landmarks (m, 16), strategy (None: segment-means), pinv (None: exact; the authors' setting is
        pinv="razavi", pinv_iters=6), stabilization (None: row-max, eq. (8)), kernel, scale, seed, ...

    Attributes
    ----------
    factors_ : nystrom.NystromFactors
        G_L, G_A, G_U, Z ≈ G_A⁺ and the pseudoinverse's diagnostics, set by `fit`.
    landmarks_ : nystrom.Landmarks
        Q̄, K̄ and, for selection strategies, the rows of Q and K they are, set by `fit`.

    Raises
    ------
    ValueError
        Naming keywords that `nystrom.nystrom_factors` does not take.

    See Also
    --------
    nystrom.nystrom_factors, nystrom.attention, nystrom.error_norm

    Examples
    --------
    >>> import numpy as np, nystrom
    >>> q, k, v = np.random.default_rng(0).standard_normal((3, 256, 32)).astype(np.float32)
    >>> model = nystrom.PnPNystra(landmarks=16, pinv="razavi", pinv_iters=6).fit(q, k)
    >>> model
    PnPNystra(pinv='razavi', pinv_iters=6)
    >>> model.landmarks_.q.shape, model.attention(v).dtype
    ((16, 32), dtype('float32'))
    >>> bool(model.error_norm() > 0)
    True
    """

    method = "pnp-nystra"


class SymmetricNystrom(_NystromEstimator):
    """Symmetric Nyström Ĝ = C W⁺ Cᵀ on m landmarks (LaplacianFormer Alg. 1; Newton–Schulz on W + εI by default),
    fitted on q and k, and its attention output Ô = (Ĝ V) ⊘ (Ĝ 1_N) on any values.

    Parameters
    ----------
    **keywords
        The keywords of `nystrom.nystrom_factors` but `method`, with its defaults: landmarks, strategy, pinv
        (None: newton-schulz), pinv_iters (None: 20), shift (None: 1e-6), kernel (LaplacianFormer's: 'laplacian'),
        lambda_, ...

    Attributes
    ----------
    factors_ : nystrom.NystromFactors
        C, W, Cᵀ and Z ≈ (W + εI)⁺, set by `fit`.
    landmarks_ : nystrom.Landmarks
        The landmarks, set by `fit`.

    Examples
    --------
    >>> import numpy as np, nystrom
    >>> q, k, v = np.random.default_rng(0).standard_normal((3, 64, 8))
    >>> nystrom.SymmetricNystrom(landmarks=8, kernel="laplacian").fit(q, k).attention(v).shape
    (64, 8)
    """

    method = "symmetric-nystrom"


class Nystromformer(_Estimator):
    """Nyströmformer (Xiong et al. 2021, eq. (15)): Ô = F̃ Ã⁺ (B̃ V) on segment-means landmarks.

    Parameters
    ----------
    **keywords
        The keywords of `nystrom.attention` but `method` and `out`: landmarks, pinv (None: razavi), pinv_iters,
        front_padding, ...

    Examples
    --------
    >>> import numpy as np, nystrom
    >>> q, k, v = np.random.default_rng(0).standard_normal((3, 64, 8))
    >>> nystrom.Nystromformer(landmarks=8).fit(q, k).attention(v).shape
    (64, 8)
    """

    method = "nystromformer"


class Cur(_Estimator):
    """CUR attention (CURformer Alg. 1): Ô = C U⁺ (R V) on selected query and key rows.

    Parameters
    ----------
    **keywords
        The keywords of `nystrom.attention` but `method` and `out`: landmarks, strategy (None: step),
        different_indices, copy_rows, ...

    Examples
    --------
    >>> import numpy as np, nystrom
    >>> q, k, v = np.random.default_rng(0).standard_normal((3, 64, 8))
    >>> nystrom.Cur(landmarks=8, copy_rows=True).fit(q, k).attention(v).shape
    (64, 8)
    """

    method = "cur"


class Performer(_Estimator):
    """Performer, FAVOR+ (Choromanski et al. 2021, Lemma 1): positive orthogonal random features,
    Ô = (Φ_Q (Φ_Kᵀ V)) ⊘ (Φ_Q (Φ_Kᵀ 1_N)).

    Parameters
    ----------
    **keywords
        The keywords of `nystrom.attention` but `method` and `out`: features (r; None: landmarks), seed, ...

    Examples
    --------
    >>> import numpy as np, nystrom
    >>> q, k, v = np.random.default_rng(0).standard_normal((3, 64, 8))
    >>> nystrom.Performer(features=16, seed=1).fit(q, k).attention(v).shape
    (64, 8)
    """

    method = "performer"


class Linformer(_Estimator):
    """Linformer, training-free (Wang et al. 2020, eq. (7)): Ô = softmax(sQ(EK)ᵀ)(FV) with fixed random
    projections E, F.

    Parameters
    ----------
    **keywords
        The keywords of `nystrom.attention` but `method` and `out`: projected (k; None: landmarks),
        share_projections, seed, ...

    Examples
    --------
    >>> import numpy as np, nystrom
    >>> q, k, v = np.random.default_rng(0).standard_normal((3, 64, 8))
    >>> nystrom.Linformer(projected=16).fit(q, k).attention(v).shape
    (64, 8)
    """

    method = "linformer"
