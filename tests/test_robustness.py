"""CIFAR-C sources agree with each other; corruption evaluation and frequency-band noise give known answers."""

import numpy as np
import pytest
import torch
from conftest import TINY
from torch import nn

import alternet_hf
from alternet_hf.data.cifar_c import CORRUPTIONS, SEVERITIES
from alternet_hf.data.cifar_c import sources as corruption_sources
from alternet_hf.data.sources import DatasetUnavailableError
from analysis import robustness

SOME = ("gaussian_noise", "glass_blur", "fog", "jpeg_compression")


@pytest.fixture(scope="module")
def clean():
    """Six 32×32 crops of a real photograph and their labels."""
    from skimage import data

    photo = torch.from_numpy(data.astronaut()).permute(2, 0, 1)
    crops = [photo[:, 64 * i : 64 * i + 64 : 2, 100:164:2] for i in range(6)]
    return torch.stack(crops).contiguous(), torch.tensor([0, 1, 2, 3, 4, 0])


@pytest.fixture(scope="module")
def generated(clean):
    return corruption_sources.GeneratedCorruptions(*clean, seed=3)


def _all(source, corruption, severity, batch_size=4):
    images, labels = zip(*source.batches(corruption, severity, batch_size=batch_size))
    return torch.cat(images), torch.cat(labels)


def test_generated_corruptions_are_reproducible_and_seeded(generated, clean):
    first, labels = _all(generated, "gaussian_noise", 3)
    again, _ = _all(corruption_sources.GeneratedCorruptions(*clean, seed=3), "gaussian_noise", 3)
    other, _ = _all(corruption_sources.GeneratedCorruptions(*clean, seed=4), "gaussian_noise", 3)
    assert first.dtype == torch.uint8 and first.shape == clean[0].shape
    assert torch.equal(first, again) and not torch.equal(first, other)
    assert torch.equal(labels, clean[1])


def test_three_sources_agree(generated, tmp_path):
    arrays = corruption_sources.ZenodoArrays(
        corruption_sources.save_as_arrays(generated, tmp_path / "zenodo", corruptions=SOME)
    )
    parquet = corruption_sources.ParquetCorruptions(
        corruption_sources.save_as_parquet(generated, tmp_path / "c.parquet", corruptions=SOME)
    )
    assert arrays.available() == list(SOME) and parquet.available() == list(SOME)
    for corruption in SOME:
        for severity in SEVERITIES:
            expected = _all(generated, corruption, severity)
            for source in (arrays, parquet):
                images, labels = _all(source, corruption, severity, batch_size=5)
                assert torch.equal(images, expected[0]), (type(source).__name__, corruption, severity)
                assert torch.equal(labels, expected[1])
    assert isinstance(corruption_sources.load_corruption_source(tmp_path / "zenodo"), corruption_sources.ZenodoArrays)
    assert isinstance(
        corruption_sources.load_corruption_source(tmp_path / "c.parquet"), corruption_sources.ParquetCorruptions
    )


def test_source_errors_say_what_is_wrong(generated, tmp_path):
    with pytest.raises(FileNotFoundError, match="labels.npy"):
        corruption_sources.ZenodoArrays(tmp_path)
    directory = corruption_sources.save_as_arrays(generated, tmp_path / "z", corruptions=["fog"])
    with pytest.raises(FileNotFoundError, match="fog"):
        next(corruption_sources.ZenodoArrays(directory).batches("frost", 1))
    with pytest.raises(ValueError, match="unknown corruption"):
        next(generated.batches("rain", 1))
    with pytest.raises(ValueError, match="severity"):
        next(generated.batches("fog", 6))
    with pytest.raises(DatasetUnavailableError, match="Offline"):  # the Hub out of reach (the tests are offline)
        corruption_sources.ParquetCorruptions("nobody/cifar100-c")


def test_evaluate_corruptions_is_the_same_from_every_source(generated, tmp_path, clean):
    model = alternet_hf.create_model("resnet-50-cifar100", **{**TINY["resnet-50-cifar100"], "image_size": 32})
    arrays = corruption_sources.ZenodoArrays(corruption_sources.save_as_arrays(generated, tmp_path, corruptions=SOME))
    from_arrays = robustness.evaluate_corruptions(model, arrays, corruptions=SOME, clean=clean)
    generated_result = robustness.evaluate_corruptions(model, generated, corruptions=SOME, batch_size=4)
    assert from_arrays.accuracy.shape == (len(SOME), len(SEVERITIES))
    np.testing.assert_allclose(from_arrays.accuracy, generated_result.accuracy)
    np.testing.assert_allclose(from_arrays.nll, generated_result.nll, rtol=1e-5)
    assert from_arrays.mean_accuracy == pytest.approx(from_arrays.accuracy.mean())
    assert set(from_arrays.clean) >= {"accuracy", "nll", "ece"}
    assert len(CORRUPTIONS) == 15
    images, labels = clean
    with pytest.raises(ValueError, match="uint8 RGB"):  # float images in [0, 1] would otherwise be divided by 255
        robustness.evaluate_corruptions(model, arrays, corruptions=SOME[:1], clean=(images / 255.0, labels))


def test_a_stratified_subset_takes_as_many_of_each_class():
    labels = np.repeat(np.arange(10), 30)[np.random.default_rng(0).permutation(300)]
    rows = robustness.stratified_subset(labels, 4, seed=1)
    assert np.all(np.diff(rows) > 0) and np.bincount(labels[rows]).tolist() == [4] * 10
    assert np.array_equal(rows, robustness.stratified_subset(labels, 4, seed=1))  # same seed, same images
    assert not np.array_equal(rows, robustness.stratified_subset(labels, 4, seed=2))
    assert len(robustness.stratified_subset(labels[:12], 5)) == 12  # a class with fewer images gives all it has
    with pytest.raises(ValueError, match="at least 1"):
        robustness.stratified_subset(labels, 0)


def test_the_subset_standard_error_is_the_spread_of_subset_means():
    """Over many draws of the subset, the mean accuracy's standard deviation is what the formula says of one draw:
    checked against the draws themselves (sets share their images, so their errors are correlated)."""
    generator = np.random.default_rng(0)
    labels = np.repeat(np.arange(20), 50)  # one set: 1,000 images, 20 balanced classes
    difficulty = generator.uniform(0.1, 0.95, len(labels)) * np.repeat(generator.uniform(0.5, 1, 20), 50)
    correct = generator.random((12, len(labels))) < difficulty  # 12 sets of the same images
    truth = correct.mean()
    means, errors = [], []
    for seed in range(1500):
        rows = robustness.stratified_subset(labels, 5, seed=seed)
        means.append(correct[:, rows].mean())
        errors.append(robustness.subset_standard_error(correct[:, rows], labels[rows], labels))
    assert np.mean(means) == pytest.approx(truth, abs=0.003)  # unbiased
    assert np.mean(errors) == pytest.approx(np.std(means), rel=0.08)
    every = np.arange(len(labels))
    assert robustness.subset_standard_error(correct, labels, labels) == 0.0  # the whole set: no sampling error
    assert robustness.subset_standard_error(correct[:, every[::50]], labels[::50], labels) > 0  # one per class


def test_a_subset_of_every_set_is_evaluated_with_its_standard_error(generated, tmp_path):
    model = alternet_hf.create_model("resnet-50-cifar100", **{**TINY["resnet-50-cifar100"], "image_size": 32}).eval()
    arrays = corruption_sources.ZenodoArrays(corruption_sources.save_as_arrays(generated, tmp_path, corruptions=SOME))
    full = robustness.evaluate_corruptions(model, arrays, corruptions=SOME, batch_size=4)
    rows = [0, 2, 5]
    subset = robustness.evaluate_corruptions(model, arrays, corruptions=SOME, rows=rows, batch_size=2)
    assert full.images_per_set is None and full.mean_accuracy_standard_error is None
    assert (subset.images_per_set, subset.set_size) == (3, 6) and subset.mean_accuracy_standard_error >= 0
    with torch.no_grad():  # each set's accuracy is that of the model on those three images
        for i, corruption in enumerate(SOME):
            images, labels = _all(arrays, corruption, 2)
            mean, std = analysis_normalization(model)
            inputs = (images[rows].float() / 255 - mean) / std  # 32×32 already: no resizing
            expected = (model(inputs).logits.argmax(-1) == labels[rows]).float().mean().item()
            assert subset.accuracy[i, 1] == pytest.approx(expected)
    compiled = robustness.evaluate_corruptions(
        model, arrays, corruptions=SOME[:1], severities=(2,), rows=rows, batch_size=2, compile_mode="default"
    )  # the last batch of each set is padded to the first's size: one graph
    assert compiled.accuracy[0, 0] == pytest.approx(subset.accuracy[0, 1])


def analysis_normalization(model):
    from analysis.shared import model_normalization

    return model_normalization(model)


def test_band_pass_noise_lives_in_its_band():
    generator = torch.Generator().manual_seed(0)
    noise = robustness.band_pass_noise((2, 3, 32, 32), 0.5, bandwidth=0.2, generator=generator)
    spectrum = torch.fft.fft2(noise).abs()
    f = torch.fft.fftfreq(32).abs() * 2
    radius = torch.maximum(f[:, None], f[None, :])
    inside = (radius > 0.4) & (radius <= 0.6)
    assert spectrum[..., ~inside].max() < 1e-4 and spectrum[..., inside].mean() > 1.0
    assert noise.dtype == torch.float32 and noise.shape == (2, 3, 32, 32)


def test_frequency_noise_spares_a_model_blind_to_high_frequencies():
    class AverageThenLinear(nn.Module):
        """Sees only each channel's mean, i.e. frequency 0: band-limited noise cannot change its output."""

        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(3, 4)

        def forward(self, x):
            return self.linear(x.mean(dim=(2, 3)))

    model = AverageThenLinear()
    inputs = torch.randn(64, 3, 16, 16)
    targets = model(inputs).argmax(-1)
    result = robustness.frequency_noise(model, (inputs, targets), frequencies=(0.3, 0.9))
    assert result.clean_accuracy == 1.0
    np.testing.assert_array_equal(result.delta_accuracy, 0.0)


def test_frequency_noise_accuracy_is_that_of_the_noisy_inputs():
    model = alternet_hf.create_model("resnet-50-cifar100", **TINY["resnet-50-cifar100"]).eval()
    inputs, targets = torch.randn(16, 3, 16, 16), torch.randint(0, 5, (16,))
    result = robustness.frequency_noise(model, (inputs, targets), eps=3.0, seed=2)
    assert result.accuracy.shape == (9,)
    generator = torch.Generator().manual_seed(2 * 1_000_003)  # the first batch's noise
    noise = robustness.band_pass_noise(inputs.shape, 0.7, eps=3.0, generator=generator)
    with torch.no_grad():
        expected = (model(inputs + noise).logits.argmax(-1) == targets).float().mean().item()
    assert result.accuracy[6] == pytest.approx(expected)


def test_each_compiled_classifier_holds_the_weights_it_was_built_with():
    """The CPU evaluation's graphs hold the weights frozen (a classifier computes with the weights it was compiled
    with, even after they change), so a classifier built after the weights changed computes with the new ones; and a
    process building many (a release evaluates every model) compiles each, never reaching dynamo's recompile limit,
    past which it would run them eager."""
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 3)).eval()
    mean, std = torch.zeros(3, 1, 1), torch.ones(3, 1, 1)
    images = torch.rand(4, 3, 2, 2)
    with torch.no_grad():
        first = robustness._classifier(model, mean, std, "default")
        before = first(images)
        for parameter in model.parameters():
            parameter.add_(0.5)
        torch.testing.assert_close(first(images), before)  # frozen: the weights it was compiled with
        after = robustness._classifier(model, mean, std, "default")(images)
        torch.testing.assert_close(after, model(images))
        assert not torch.allclose(before, after)
        counters.clear()
        many = torch._dynamo.config.recompile_limit + 1
        for _ in range(many):
            robustness._classifier(model, mean, std, "default")(images)
    assert counters["stats"]["unique_graphs"] == many  # each compiled: none run eager


def test_one_model_s_classifiers_are_built_once_for_its_check_its_speed_probe_and_its_pass(generated, monkeypatch):
    """`Classifiers` given to the bf16 check, the speed probe and the evaluation: one function per precision, built
    once (a CPU release compiles each graph once), with the numbers of functions built for each call alone."""
    torch.manual_seed(0)
    model = alternet_hf.create_model("resnet-50-cifar100", **TINY["resnet-50-cifar100"]).eval()
    built = []
    original = robustness._classifier
    monkeypatch.setattr(robustness, "_classifier", lambda *args: built.append(args[-1]) or original(*args))
    rows = robustness.stratified_subset(generated.set_labels("fog", 3), 1, seed=0)
    options = dict(corruptions=SOME, severities=(1, 3), batch_size=4)
    alone = robustness.bf16_agreement(model, generated, rows=rows, batch_size=4)
    alone_result = robustness.evaluate_corruptions(model, generated, bf16=True, **options)
    assert len(built) == 3
    built.clear()
    classifiers = robustness.Classifiers(model)
    shared = robustness.bf16_agreement(model, generated, rows=rows, batch_size=4, classifiers=classifiers)
    robustness.images_per_second(model, batch_size=4, bf16=True, repeats=1, classifiers=classifiers)
    result = robustness.evaluate_corruptions(model, generated, bf16=True, classifiers=classifiers, **options)
    assert built == [False, True] and shared == alone
    np.testing.assert_array_equal(result.accuracy, alone_result.accuracy)
    other = alternet_hf.create_model("resnet-50-cifar100", **TINY["resnet-50-cifar100"]).eval()
    with pytest.raises(ValueError, match="built for another model: give each model its own"):
        robustness.images_per_second(other, batch_size=4, repeats=1, classifiers=classifiers)


@pytest.mark.parametrize("preset", ["resnet-50-cifar100", "vit-ti-cifar100", "pit-ti-cifar100", "swin-ti-cifar100"])
def test_the_frozen_compiled_evaluation_predicts_what_eager_does_to_the_image(preset):
    """The CPU evaluation compiled with frozen weights (and, for a model of linear layers where oneDNN is the faster
    here, a dynamic batch): the top-1 of every image of the release rehearsal's stand-in test split is eager's."""
    from zoo_release.rehearsal import REFERENCE_STAND_INS, stand_in_images

    images, labels = stand_in_images("test")
    batch = torch.stack([torch.from_numpy(np.array(image.convert("RGB"))).permute(2, 0, 1) for image in images])
    torch.manual_seed(0)
    model = alternet_hf.create_model(preset, **REFERENCE_STAND_INS[preset]).eval()
    source = corruption_sources.GeneratedCorruptions(batch, torch.tensor(labels), seed=0)
    logits = {}
    with torch.no_grad():
        for mode in (None, "default"):
            classify = robustness._classifier(model, *robustness.model_normalization(model), mode)
            logits[mode], _ = robustness._predict(classify, source.batches("contrast", 1, batch_size=32), "cpu", 32)
    assert (logits[None].argmax(-1) == logits["default"].argmax(-1)).all()
    np.testing.assert_allclose(logits["default"], logits[None], atol=1e-4, rtol=1e-4)
