"""The torch adapters of the module (nystrom.torch): tensors in and out, the drop-in for
torch.nn.functional.scaled_dot_product_attention and the context manager that puts it in place in a model."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import nystrom  # noqa: E402
import nystrom.torch  # noqa: E402


def heads(dtype=torch.float32, shape=(2, 3, 64, 16), seed=0):
    generator = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(shape, generator=generator, dtype=dtype) for _ in range(3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_attention_on_tensors_matches_the_arrays(dtype):
    q, k, v = heads(dtype)
    out = nystrom.torch.attention(q, k, v, method="pnp-nystra", landmarks=8)
    assert isinstance(out, torch.Tensor) and out.dtype == dtype and out.shape == (2, 3, 64, 16)
    np.testing.assert_array_equal(out.numpy(), nystrom.attention(q.numpy(), k.numpy(), v.numpy(), landmarks=8))


def test_half_precision_is_computed_in_float32():
    q, k, v = heads(torch.float32)
    out = nystrom.torch.attention(q.half(), k.half(), v.half(), method="exact")
    assert out.dtype == torch.float16
    reference = torch.nn.functional.scaled_dot_product_attention(q.half().float(), k.half().float(), v.half().float())
    torch.testing.assert_close(out.float(), reference, atol=2e-3, rtol=2e-3)


def test_exact_method_is_torch_sdpa():
    q, k, v = heads(torch.float64)
    reference = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(nystrom.torch.scaled_dot_product_attention(q, k, v, method="exact"), reference)
    scaled = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.05)
    torch.testing.assert_close(nystrom.torch.scaled_dot_product_attention(q, k, v, scale=0.05, method="exact"), scaled)


def test_grouped_query_attention_repeats_key_heads():
    q, _, _ = heads(torch.float64, (1, 4, 32, 8))
    _, k, v = heads(torch.float64, (1, 2, 32, 8), seed=1)
    reference = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    torch.testing.assert_close(nystrom.torch.scaled_dot_product_attention(q, k, v, enable_gqa=True, method="exact"),
                               reference)


class TinyAttention(torch.nn.Module):
    """A self-attention layer written the way timm's and Hugging Face's are: projections, then
    F.scaled_dot_product_attention looked up at call time."""

    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(b, n, c))


def test_context_manager_replaces_the_attention_of_a_model():
    torch.manual_seed(0)
    model = TinyAttention().eval()
    x = torch.randn(2, 64, 32)
    original = torch.nn.functional.scaled_dot_product_attention
    with torch.inference_mode():
        reference = model(x)
        with nystrom.torch.approximate_attention(method="exact"):
            assert torch.nn.functional.scaled_dot_product_attention is not original
            exact = model(x)
        with nystrom.torch.approximate_attention(method="pnp-nystra", landmarks=64, pinv="exact", stabilization="none"):
            full_rank = model(x)  # m = N landmarks: Ĝ = G
        with nystrom.torch.approximate_attention(method="pnp-nystra", landmarks=4):
            approximate = model(x)
    assert torch.nn.functional.scaled_dot_product_attention is original
    torch.testing.assert_close(exact, reference, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(full_rank, reference, atol=1e-3, rtol=1e-3)
    assert not torch.allclose(approximate, reference, atol=1e-3)


def test_inference_only_and_no_masks():
    q, k, v = heads()
    with pytest.raises(RuntimeError, match="inference only"):
        nystrom.torch.attention(q.requires_grad_(), k, v)
    q = q.detach()
    with pytest.raises(ValueError, match="masks"):
        nystrom.torch.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(64, 64, dtype=torch.bool))
    with pytest.raises(ValueError, match="masks"):
        nystrom.torch.scaled_dot_product_attention(q, k, v, is_causal=True)
    with pytest.raises(ValueError, match="dropout_p"):
        nystrom.torch.scaled_dot_product_attention(q, k, v, dropout_p=0.1)
    with torch.no_grad():
        assert nystrom.torch.attention(q.requires_grad_(), k, v, landmarks=4).shape == (2, 3, 64, 16)


def test_dtypes_other_than_real_floating_are_refused():
    q, k, v = heads()
    for bad, name in ((q.long(), "torch.int64"), (q.to(torch.complex64), "torch.complex64"), (q > 0, "torch.bool")):
        with pytest.raises(TypeError, match=name):
            nystrom.torch.attention(bad, bad, bad, method="exact")
    with pytest.raises(ValueError, match="one dtype"):
        nystrom.torch.attention(q, k.double(), v, method="exact")


def test_a_scale_option_is_the_default_the_model_call_overrides():
    q, k, v = heads(torch.float64)
    with torch.inference_mode():
        with nystrom.torch.approximate_attention(method="exact", scale=0.05):
            by_option = torch.nn.functional.scaled_dot_product_attention(q, k, v)
            by_call = torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.2)
    torch.testing.assert_close(by_option, torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.05))
    torch.testing.assert_close(by_call, torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=0.2))


def test_grouped_query_attention_needs_heads_that_divide():
    q, _, _ = heads(torch.float64, (1, 4, 32, 8))
    _, k, v = heads(torch.float64, (1, 3, 32, 8), seed=1)
    with pytest.raises(ValueError, match="multiple of the key heads"):
        nystrom.torch.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    flat = q[0, 0]
    with pytest.raises(ValueError, match="enable_gqa needs"):
        nystrom.torch.scaled_dot_product_attention(flat, flat, flat, enable_gqa=True)


def test_a_block_without_any_scaled_dot_product_attention_call_warns():
    q, k, v = heads(torch.float64)
    with torch.inference_mode():
        with pytest.warns(RuntimeWarning, match="no torch.nn.functional.scaled_dot_product_attention call.*"
                                                "nothing was approximated.*replace_attention"):
            with nystrom.torch.approximate_attention(method="exact"):
                torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v  # attention written out, as SwinIR's
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with nystrom.torch.approximate_attention(method="exact"):
                torch.nn.functional.scaled_dot_product_attention(q, k, v)
            with pytest.raises(KeyError):  # a block that raised: the exception, no warning
                with nystrom.torch.approximate_attention(method="exact"):
                    raise KeyError("x")
