"""The comparison: claims decided from known inputs (a blur reads as low-pass, a Laplacian as high-pass),
per-block analyses from one pass of the model, every figure with every model, and the report."""

import json

import matplotlib
import numpy as np
import pytest
import torch
from conftest import BOX_BLUR, LAPLACIAN, TINY, Filter
from torch import nn

import alternet_hf
from analysis import claims, registry, runner
from analysis.blocks import AccuracyResult, BlockAdapter
from analysis.fourier import FourierResult
from analysis.report import comparison_figures, write_comparison

matplotlib.use("Agg")


class Chain(nn.Module):
    def __init__(self, *kernels):
        super().__init__()
        self.blocks = nn.ModuleList(Filter(k) for k in kernels)
        self.head = nn.Linear(3, 4)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x.mean(dim=(2, 3)))


def chain_results(kinds: list[str], kernels) -> dict:
    model = Chain(*kernels)
    adapter = BlockAdapter(list(zip(kinds, model.blocks)))
    images = torch.rand(8, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    return runner.analyse(
        model, ["fourier", "variance"], test_data=(images, torch.zeros(8, dtype=torch.long)), adapter=adapter
    )


# The trace, density and per-block curvature at the smallest amounts that take their whole path.
SMALL_HESSIAN = dict(trace_rtol=0.5, trace_max_samples=4, deflation_steps=2, slq_vectors=2, slq_steps=3)


def verdicts(results: dict) -> dict[str, str]:
    return {claim.key: claim.verdict for claim in claims.evaluate_claims(results)}


def test_a_blur_reads_as_low_pass_and_a_laplacian_as_high_pass():
    found = verdicts({"net": chain_results(["msa", "conv"], [BOX_BLUR, LAPLACIAN])})
    assert found["msa-low-pass"] == claims.HOLDS and found["conv-high-pass"] == claims.HOLDS
    assert found["msa-reduce-variance"] == claims.HOLDS and found["conv-increase-variance"] == claims.HOLDS
    swapped = verdicts({"net": chain_results(["msa", "conv"], [LAPLACIAN, BOX_BLUR])})
    assert swapped["msa-low-pass"] == claims.FAILS and swapped["conv-high-pass"] == claims.FAILS
    both = verdicts(
        {
            "good": chain_results(["msa", "conv"], [BOX_BLUR, LAPLACIAN]),
            "bad": chain_results(["msa", "conv"], [LAPLACIAN, BOX_BLUR]),
        }
    )
    assert both["msa-low-pass"] == claims.MIXED
    assert found["msa-flat-hessian"] == claims.UNDECIDED  # no Hessian, no CNN: nothing to decide it on


def test_downsampling_blocks_stay_out_of_the_conv_statistics():
    kinds = ["input", "stem", "conv", "pool", "conv", "head"]
    high = np.array([0.0, -5.0, -4.0, -1.0, -0.5, -0.5])  # the pool block makes the one big rise
    curves = np.stack([np.linspace(0, value, 3) for value in high])
    result = FourierResult(np.linspace(0, 1, 3), curves, np.diff(curves, axis=0), kinds)
    claim = claims.evaluate_claims({"cnn": {"fourier": result}})[1]
    assert claim.key == "conv-high-pass" and claim.numbers["cnn"]["conv"]["values"] == pytest.approx([1.0, 0.5])
    assert any("downsampling blocks (not counted) +3.000" in line for line in claim.evidence)


def test_the_lesion_claim_leaves_downsampling_blocks_out_of_the_other_blocks():
    """As the module says of every claim: removing a downsampling block costs much (it changes the shapes the
    next stage sees), which is not what the stage-end claim compares."""
    from analysis.lesion import LesionResult

    kinds = ["stem", "conv", "msa", "pool", "conv", "msa", "head"]
    accuracy = np.array([np.nan, 0.80, 0.60, 0.10, 0.85, 0.50, np.nan])
    lesion = LesionResult(kinds, 0.9, 0.3, accuracy, np.zeros(7), 100)
    claim = claims.evaluate_claims({"alternet": {"lesion": lesion}}, {"alternet": {"kinds": kinds}})[-3]
    assert claim.key == "stage-end-msa-lesion"
    numbers = claim.numbers["alternet"]
    assert numbers["stage_end_msas"] == [2, 5]
    assert numbers["stage_end_msa_drop"] == pytest.approx(0.35) and numbers["other_drop"] == pytest.approx(0.075)
    assert claim.checks == {"alternet": True}
    assert "downsampling blocks (not counted) −80.0 (1)" in claim.evidence[0]


def test_orderings_and_pairs_against_the_cnn():
    def found(accuracy, top, smallest, noise):
        hessian = type("S", (), {"eigenvalues": np.array([[top]]), "smallest_eigenvalues": np.array([[smallest]])})
        frequency = type("F", (), {"frequencies": np.array([0.1, 0.9]), "delta_accuracy": np.array([0.0, noise])})
        return {
            "accuracy": AccuracyResult(accuracy, 0.1, 100_000),
            "hessian": hessian,
            "frequency-noise": frequency,
        }

    results = {
        "resnet": found(0.95, 50.0, -1.0, -0.20),
        "vit": found(0.90, 10.0, -5.0, -0.05),
        "alternet": found(0.97, 20.0, -2.0, -0.10),
    }
    summaries = {
        "resnet": {"kinds": ["stem", "conv"]},
        "vit": {"kinds": ["stem", "msa", "mlp"]},
        "alternet": {"kinds": ["stem", "conv", "msa"]},
    }
    decided = {c.key: c for c in claims.evaluate_claims(results, summaries)}
    assert decided["accuracy-order"].checks == {"alternet ≥ resnet": True, "resnet > vit": True}
    assert decided["msa-flat-hessian"].checks == {"vit < resnet": True, "alternet < resnet": True}
    assert decided["vit-negative-eigenvalues"].checks == {"vit > resnet": True}  # |−5|/10 > |−1|/50
    assert decided["msa-robust-high-frequency"].verdict == claims.HOLDS
    results["vit"]["accuracy"] = AccuracyResult(0.99, 0.1, 100_000)
    assert claims.evaluate_claims(results, summaries)[-2].verdict == claims.MIXED


def test_a_difference_inside_the_noise_is_undecided_and_a_near_chance_model_is_named():
    """The report's honesty rules on inputs whose answer is known: 0.28 points on 360 images (one image) cannot
    order two models, 10 points on 10,000 can; a model at 15% on 10 classes (below twice chance) is named."""

    def found(accuracy, images):
        return {"accuracy": AccuracyResult(accuracy, 0.1, images)}

    summaries = {
        "resnet": {"kinds": ["stem", "conv"], "num_labels": 10},
        "alternet": {"kinds": ["stem", "conv", "msa"], "num_labels": 10},
        "vit": {"kinds": ["stem", "msa", "mlp"], "num_labels": 10},
    }
    close = {"alternet": found(0.9972, 360), "resnet": found(0.9944, 360), "vit": found(0.15, 360)}
    order = claims.evaluate_claims(close, summaries)[-2]
    assert order.checks["alternet ≥ resnet"] is None and order.checks["resnet > vit"] is True
    assert order.verdict == claims.WITHIN_NOISE and order.below_competence == ["vit"]
    assert "± " in order.evidence[0]
    apart = {"alternet": found(0.95, 10_000), "resnet": found(0.85, 10_000), "vit": found(0.60, 10_000)}
    assert claims.evaluate_claims(apart, summaries)[-2].verdict == claims.HOLDS
    assert claims.below_competence(close, summaries) == {"vit": (0.15, 0.2)}
    assert claims.below_competence(close, summaries, competence=1.0) == {}

    # per-block statistics: two MSAs that disagree (−0.6 and +0.4) leave the low-pass claim undecided
    kinds = ["input", "stem", "msa", "conv", "msa", "head"]
    high = np.array([0.0, -1.0, -1.6, -1.0, -0.6, -0.6])
    curves = np.stack([np.linspace(0, value, 3) for value in high])
    result = FourierResult(np.linspace(0, 1, 3), curves, np.diff(curves, axis=0), kinds)
    low_pass = claims.evaluate_claims({"alternet": {"fourier": result}})[0]
    assert low_pass.numbers["alternet"]["msa"]["values"] == pytest.approx([-0.6, 0.4])
    assert low_pass.checks == {"alternet msa": None} and low_pass.verdict == claims.WITHIN_NOISE


def test_one_block_is_judged_by_its_spread_over_images_not_by_its_sign():
    """A single MSA block has no spread over blocks: its check weighs the change against the spread over the test
    images, and a change inside that noise is undecided, not decided by its sign."""
    kinds = ["input", "stem", "msa", "head"]
    curves = np.stack([np.linspace(0, value, 3) for value in (0.0, -1.0, -1.3, -1.3)])
    for image_error, verdict in ((0.05, claims.HOLDS), (0.5, claims.WITHIN_NOISE)):
        result = FourierResult(np.linspace(0, 1, 3), curves, np.diff(curves, axis=0), kinds, {"msa": image_error})
        low_pass = claims.evaluate_claims({"vit": {"fourier": result}})[0]
        assert low_pass.verdict == verdict and low_pass.numbers["vit"]["msa"]["standard_error"] == image_error
        assert "(over images)" in low_pass.evidence[0] and "by sign" not in low_pass.evidence[0]
    # two blocks that disagree: their spread over blocks, the larger, decides
    assert claims.larger_error(0.5, 0.05, 2) == (0.5, "over blocks")
    assert claims.larger_error(0.0, None, 1) == (0.0, "no spread: decided by sign")  # results from before


def test_image_spreads_average_to_the_batch_statistics():
    """Each image's ΔlogA at π averages to the batch's (the spread is of the statistic the claims use), and the
    spread over images of a known per-image difference is its textbook standard error."""
    from analysis import fourier

    maps = torch.randn(6, 4, 8, 8) * torch.linspace(0.5, 2.0, 6).view(6, 1, 1, 1)
    frequencies, values = fourier.half_diagonal(fourier.mean_log_amplitude(maps))
    assert fourier.high_frequency_per_image(maps).mean().item() == pytest.approx(values[-1])
    odd = torch.randn(5, 3, 7, 7)
    assert fourier.high_frequency_per_image(odd).mean().item() == pytest.approx(
        fourier.half_diagonal(fourier.mean_log_amplitude(odd))[1][-1]
    )
    spread = fourier.ImageSpread()
    before, after = np.zeros(10), np.arange(10.0)
    spread.update(["input", "msa"], np.stack([before[:4], after[:4]]))  # two batches
    spread.update(["input", "msa"], np.stack([before[4:], after[4:]]))
    assert spread.errors()["msa"] == pytest.approx(np.std(after, ddof=1) / np.sqrt(10))


def test_per_block_analyses_share_one_pass_and_match_the_single_analyses():
    from analysis import cka, fourier, variance

    model = alternet_hf.create_model("alternet-50-cifar100", **TINY["alternet-50-cifar100"])
    calls = []
    model.register_forward_hook(lambda module, args, output: calls.append(1))
    batches = [(torch.randn(6, 3, 16, 16), torch.randint(0, 5, (6,))) for _ in range(2)]
    results = runner.analyse(model, ["fourier", "variance", "cka"], test_data=batches)
    assert len(calls) == 2  # one forward pass per batch for all three, and the accuracy
    assert results["accuracy"].num_samples == 12
    np.testing.assert_allclose(
        results["fourier"].relative_log_amplitude, fourier.fourier_log_amplitude(model, batches).relative_log_amplitude
    )
    single = variance.feature_map_variance(model, batches)
    np.testing.assert_allclose(results["variance"].variance, single.variance)
    np.testing.assert_allclose(results["cka"].similarity, cka.cka(model, batches).similarity)
    # The notebook's definition on the same maps: divided by H·W − 1 instead of H·W.
    sides = [16] + [16] * 2 + [8] * 2 + [4] * 2 + [4]
    assert len(sides) == len(single.variance)
    np.testing.assert_allclose(
        single.reference_variance / single.variance, [s * s / (s * s - 1) for s in sides], rtol=1e-5
    )


def test_settings_scale_down_on_a_cpu_and_say_so():
    settings, notes = registry.Settings.for_device("cpu", hessian_batches=7)
    assert settings.hessian_batches == 7 and settings.lanczos_steps == registry.Settings.CPU_AMOUNTS["lanczos_steps"]
    assert any(note.startswith("lanczos-steps 30 (paper: 100)") for note in notes)
    assert not any("hessian-batches" in note for note in notes)
    gpu, gpu_notes = registry.Settings.for_device("cuda")
    assert gpu == registry.Settings() and gpu_notes == []
    with pytest.raises(ValueError, match="unknown settings"):
        registry.Settings.for_device("cpu", hessian_batch=3)


def test_the_hessian_estimate_multiplies_a_timed_product_and_leaves_the_model_as_it_was():
    torch.manual_seed(0)
    model = alternet_hf.create_model("alternet-50-cifar100", **{**TINY["alternet-50-cifar100"], "num_labels": 4})
    model.train()
    before = {name: value.clone() for name, value in model.state_dict().items()}
    images, labels = torch.randn(8, 3, 16, 16), torch.arange(8) % 4
    settings = registry.Settings(hessian_batches=3, lanczos_steps=7, density_vectors=0)
    costs = runner.measure_costs(model, test_batch=(images, labels), train_batch=(images, labels), hessian=settings)
    assert costs["hvp"] > 0 and costs["test_forward"] > 0 and costs["test_batch_size"] == 8
    costs |= {"test_batches": 1, "num_branches": 0, "corruption_images": None}
    seconds, how = runner.estimate_seconds(["hessian"], costs, settings)["hessian"]
    assert seconds == pytest.approx(3 * 7 * costs["hvp"]) and "3 minibatches × 7 Lanczos steps" in how
    assert model.training and all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert "hvp" not in runner.measure_costs(model, test_batch=(images, labels), train_batch=(images, labels))


def test_comparison_of_two_zoo_models_writes_every_figure_json_and_report(tmp_path):
    models = {
        name: alternet_hf.create_model(name, **{**TINY[name], "num_labels": 4})
        for name in ("alternet-50-cifar100", "resnet-50-cifar100", "vit-ti-cifar100")
    }
    generator = torch.Generator().manual_seed(0)
    test = [(torch.randn(8, 3, 16, 16, generator=generator), torch.randint(0, 4, (8,), generator=generator))]
    train = [(torch.randn(8, 3, 16, 16, generator=generator), torch.randint(0, 4, (8,), generator=generator))]
    settings = registry.Settings(
        hessian_batches=1,
        top_k=1,
        bottom_k=1,
        lanczos_steps=2,
        hessian_tol=1e-1,
        density_vectors=1,
        density_steps=2,
        landscape_points=3,
        landscape_protocol="reference",
        **SMALL_HESSIAN,
    )
    results, summaries = {}, {}
    for name, model in models.items():
        short = name.split("-")[0]
        # Hessian-vector products of AlterNet's tiny convolutions are slow on a CPU: its Hessian analyses are left out.
        analyses = [
            a for a in registry.ANALYSES if a != "robustness" and (short != "alternet" or not a.startswith("hessian"))
        ]
        results[short] = runner.analyse(model, analyses, test_data=test, train_data=lambda: train, settings=settings)
        summaries[short] = {**runner.summary_of(model), "source": name}
    written = write_comparison(tmp_path, results, summaries, meta={"dataset": "random"}, notes=["a note"])
    figures = {
        "fourier_by_depth",
        "fourier_spectra",
        "variance_by_depth",
        "hessian_spectra",
        "landscape",
        "frequency_noise",
        "lesion",
        "cka",
    }
    assert figures <= set(written) and all(written[f].stat().st_size > 10_000 for f in figures)
    payload = json.loads(written["json"].read_text())
    assert set(payload["models"]) == {"alternet", "resnet", "vit"}
    assert payload["models"]["alternet"]["role"] == "hybrid" and payload["models"]["vit"]["role"] == "transformer"
    assert payload["models"]["resnet"]["results"]["landscape"]["protocol"] == "reference"
    assert len(payload["claims"]) == 13 and all("verdict" in c for c in payload["claims"])
    assert set(payload["variance_definitions"]) >= {"alternet msa", "vit msa", "resnet conv"}
    report = written["report"].read_text()
    assert report.count("\n| ") >= 3 + 13 + 2 and "![fourier_by_depth](fourier_by_depth.png)" in report
    assert "the metric" in report and "a note" in report
    by_depth = comparison_figures({k: {"fourier": v["fourier"]} for k, v in results.items()})
    assert len(by_depth["fourier_by_depth"].axes) == 1 + 3  # the curves, and one block strip per model


def test_a_comparison_from_stored_results_equals_the_one_computed(tmp_path):
    """Every analysis written by `compare_models` reads back (`runner.read_results`) into the same comparison:
    what a resumed release builds after analysing each model in its own step."""
    from analysis.inputs import DataOptions
    from analysis.runner import compare_models, compare_stored

    specs = []
    for preset in ("alternet-50-cifar100", "resnet-50-cifar100"):
        folder = tmp_path / preset
        alternet_hf.create_model(preset, **{**TINY[preset], "num_labels": 10}).save_pretrained(folder)
        specs.append((preset.split("-")[0], str(folder)))
    settings = registry.Settings(
        max_batches=1,
        train_batch_size=8,
        hessian_batches=1,
        top_k=1,
        bottom_k=1,
        lanczos_steps=3,
        density_vectors=1,
        density_steps=4,
        landscape_points=3,
        corruptions=("fog",),
        severities=(2,),
        corruption_images=16,
        **SMALL_HESSIAN,
    )
    common = dict(data=DataOptions(batch_size=16), settings=settings, device=torch.device("cpu"), image_size=32)
    computed = compare_models(
        specs,
        registry.ANALYSES,
        results_dir=tmp_path / "results",
        comparison_dir=tmp_path / "computed",
        say=lambda line: None,
        **common,
    )
    stored = compare_stored(specs, results_dir=tmp_path / "results", comparison_dir=tmp_path / "stored", **common)
    assert json.loads(stored["json"].read_text()) == json.loads(computed["json"].read_text())
    assert stored["report"].read_text() == computed["report"].read_text().replace(
        str(tmp_path / "computed"), str(tmp_path / "stored")
    )


def test_the_trace_and_the_block_curvature_decide_their_claims_with_their_errors():
    from analysis.curvature import BlockCurvatureResult
    from analysis.hessian import TracesResult

    def traces(values, error):
        n = len(values)
        flags = np.ones(n, dtype=bool)
        return TracesResult(
            np.array(values),
            np.full(n, 1.96 * error),
            np.full(n, error),
            np.zeros(n),
            np.ones(n),
            flags,
            flags,
            0,
            0.01,
        )

    def blocks(tops):
        nan = np.array([np.nan])
        kinds = ["stem", "conv", "conv", "msa", "msa"]
        array = np.array([[np.nan, *tops]])  # the stem owns no parameters: NaN, left out
        return BlockCurvatureResult(
            kinds, kinds, [0, 1, 1, 1, 1], array, array, array, array, array > 0, 0, nan, nan, nan, 0
        )

    kinds = {"cnn": {"kinds": ["stem", "conv", "conv"]}, "hybrid": {"kinds": ["stem", "conv", "msa"]}}
    results = {"cnn": {"hessian-trace": traces([300, 320], 2.0)}, "hybrid": {"hessian-trace": traces([200, 210], 2.0)}}
    decided = {c.key: c for c in claims.evaluate_claims(results, kinds)}
    assert decided["msa-flat-trace"].checks == {"hybrid < cnn": True}
    assert decided["msa-blocks-flat"].verdict == claims.UNDECIDED  # not measured
    noisy = {name: {"hessian-trace": traces([t], 60.0)} for name, t in (("cnn", 300), ("hybrid", 200))}
    assert {c.key: c for c in claims.evaluate_claims(noisy, kinds)}["msa-flat-trace"].verdict == claims.WITHIN_NOISE
    flat = {"hybrid": {"hessian-blocks": blocks([10.0, 11.0, 2.0, 3.0])}}
    decided = {c.key: c for c in claims.evaluate_claims(flat, {"hybrid": kinds["hybrid"]})}
    assert decided["msa-blocks-flat"].checks == {"hybrid msa < conv": True}
    assert "MSA 2.5 ± 0.5 (2 blocks), Conv 10.5 ± 0.5 (2)" in decided["msa-blocks-flat"].evidence[0]
