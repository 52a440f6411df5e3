"""The contract every zoo family keeps, after transformers' `tests/test_modeling_common.py`: one tester per
family with a tiny configuration (conftest.TINY), one mixin of checks that every family passes.

AlterNet and the CIFAR ResNet are our classes; ViT is transformers' `ViTForImageClassification` as
`alternet_hf.create_model` makes it. Losses are compared with torch's own functions and with transformers'
own classification loss, exports with onnxruntime, checkpointed gradients with plain ones.
"""

import contextlib
import copy
import io
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from conftest import TINY
from torch.nn import functional as F
from torch.utils.data import SequentialSampler
from transformers import (
    AutoConfig,
    AutoImageProcessor,
    AutoModel,
    AutoModelForImageClassification,
    Trainer,
    TrainingArguments,
    pipeline,
)
from transformers.loss.loss_utils import ForSequenceClassificationLoss
from transformers.modeling_layers import GradientCheckpointingLayer
from upstream import raises_from

import alternet_hf
from alternet_hf.data.augmentation import BatchMixer, mix_batch
from alternet_hf.models.modeling_common import DropPath

# A user who has transformers but not alternet_hf: one interpreter for every family's remote-code check (its imports
# paid once), each check a script in a namespace of its own, each saved folder a remote-code module of its own.
USER_WITHOUT_THE_PACKAGE = r"""
import contextlib, io, json, sys, traceback
sys.modules["alternet_hf"] = None  # any import of the package fails
for line in sys.stdin:
    said = io.StringIO()
    try:
        with contextlib.redirect_stdout(said):
            exec(json.loads(line), {"__name__": "__main__"})
        answer = {"ok": True, "stdout": said.getvalue()}
    except BaseException:
        answer = {"ok": False, "stdout": said.getvalue(), "error": traceback.format_exc()}
    print("ANSWER " + json.dumps(answer), flush=True)
"""


@pytest.fixture(scope="module")
def user_without_the_package(tmp_path_factory):
    """`run(script)` -> {ok, stdout, error}: the script run by the user's interpreter."""
    folder = tmp_path_factory.mktemp("user")
    env = {**os.environ, "HF_MODULES_CACHE": str(folder / "modules"), "PYTHONPATH": ""}
    process = subprocess.Popen(
        [sys.executable, "-c", USER_WITHOUT_THE_PACKAGE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=folder,
    )

    def run(script: str) -> dict:
        process.stdin.write(json.dumps(script) + "\n")
        process.stdin.flush()
        answer = next((line for line in process.stdout if line.startswith("ANSWER ")), None)
        assert answer is not None, f"the user's interpreter ended (exit status {process.wait()})"
        return json.loads(answer.removeprefix("ANSWER "))

    yield run
    process.stdin.close()
    process.wait(60)


class ModelTester:
    """Builds one family's tiny model and inputs for the checks below."""

    def __init__(self, preset: str, *, ours: bool = True, batch_norm: bool = True):
        self.preset = preset
        self.ours = ours  # our class (remote code); otherwise transformers' own
        self.batch_norm = batch_norm  # has running statistics (eval and train differ)
        self.num_labels = TINY[preset]["num_labels"]
        self.image_size = TINY[preset]["image_size"]

    def create_model(self, **overrides):
        return alternet_hf.create_model(self.preset, **{**TINY[self.preset], **overrides})

    @property
    def is_timm(self) -> bool:
        """timm's own modules in transformers' TimmWrapper (PiT, Swin)."""
        return self.preset.split("-")[0] in ("pit", "swin")

    @staticmethod
    def classifier(model):
        return model.timm_model.get_classifier() if hasattr(model, "timm_model") else model.classifier

    @staticmethod
    def image_mean(processor) -> list[float]:
        """The normalisation of the image processor transformers loads (timm's: from the config's pretrained_cfg)."""
        mean = processor.data_config["mean"] if hasattr(processor, "data_config") else processor.image_mean
        return list(mean)

    def pixel_values(self, batch_size: int = 3) -> torch.Tensor:
        return torch.randn(batch_size, 3, self.image_size, self.image_size)

    def labels(self, batch_size: int = 3) -> torch.Tensor:
        return torch.arange(batch_size) % self.num_labels

    def soft_labels(self, batch_size: int = 3) -> torch.Tensor:
        return torch.randn(batch_size, self.num_labels).softmax(-1)


class ModelContractMixin:
    tester: ModelTester

    # ---- forward, loss, gradients -------------------------------------------------------------------------

    def test_forward_shapes_and_loss(self):
        model = self.tester.create_model()
        pixel_values, labels = self.tester.pixel_values(), self.tester.labels()
        outputs = model(pixel_values, labels=labels)
        assert outputs.logits.shape == (3, self.tester.num_labels)
        torch.testing.assert_close(outputs.loss, F.cross_entropy(outputs.logits, labels))
        loss, logits = model(pixel_values, labels=labels, return_dict=False)[:2]
        assert logits.shape == (3, self.tester.num_labels) and loss.ndim == 0

    def test_every_parameter_gets_a_gradient(self):
        model = self.tester.create_model()
        model(self.tester.pixel_values(), labels=self.tester.labels()).loss.backward()
        without = [name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
        assert without == []

    def test_mixup_targets_give_soft_target_cross_entropy(self, tmp_path):
        """The training engine's call, `forward(pixel_values, labels=mixed).loss`, on the paper recipe's
        Mixup/CutMix/label-smoothing targets: soft-target cross-entropy (torch's, with probabilities), for
        ViT too; the config is left without a `problem_type`, and hard labels still work afterwards."""
        model = self.tester.create_model()
        mixer = BatchMixer(mixup_alpha=1.0, cutmix_alpha=0.8, image_size=self.tester.image_size, seed=0)
        pixel_values, labels = mix_batch(
            self.tester.pixel_values(4), self.tester.labels(4), mixer.parameters(0, 0), self.tester.num_labels
        )
        labels = labels * 0.9 + 0.1 / self.tester.num_labels  # label smoothing 0.1, as the recipe's loss applies it
        assert labels.shape == (4, self.tester.num_labels) and labels.dtype.is_floating_point
        outputs = model(pixel_values, labels=labels)
        torch.testing.assert_close(outputs.loss, F.cross_entropy(outputs.logits, labels))
        assert not torch.allclose(outputs.loss, F.binary_cross_entropy_with_logits(outputs.logits, labels))
        assert model.config.problem_type is None
        model(pixel_values, labels=self.tester.labels(4))
        model.save_pretrained(tmp_path)
        assert json.loads((tmp_path / "config.json").read_text()).get("problem_type") is None

    @pytest.mark.parametrize(
        "problem_type, make_labels, expected_loss",
        [
            ("single_label_classification", lambda n, c: torch.arange(n) % c, F.cross_entropy),
            (
                "multi_label_classification",
                lambda n, c: (torch.rand(n, c) > 0.5).float(),
                F.binary_cross_entropy_with_logits,
            ),  # noqa: E501
            ("regression", lambda n, c: torch.randn(n, c), F.mse_loss),
        ],
    )
    def test_problem_types_give_transformers_losses(self, problem_type, make_labels, expected_loss):
        """`config.problem_type` as transformers' own ResNet reads it: torch's loss, and transformers' value."""
        model = self.tester.create_model(problem_type=problem_type)
        labels = make_labels(3, self.tester.num_labels)
        outputs = model(self.tester.pixel_values(), labels=labels)
        torch.testing.assert_close(outputs.loss, expected_loss(outputs.logits, labels))
        transformers_loss = ForSequenceClassificationLoss(labels, outputs.logits, copy.deepcopy(model.config))
        torch.testing.assert_close(outputs.loss, transformers_loss)
        assert model.config.problem_type == problem_type

    def test_problem_type_none_is_inferred_without_writing_it(self):
        """None: one label → regression, class indices → cross-entropy, boolean multi-hot → BCE, as transformers
        infers it; float targets → soft-target cross-entropy (where transformers would take them for
        multi-label). The inferred type stays out of the config. A single-label config takes soft targets."""
        model = self.tester.create_model()
        pixel_values = self.tester.pixel_values()
        logits = model.eval()(pixel_values).logits
        multi_hot = torch.rand(3, self.tester.num_labels) > 0.5
        soft = self.tester.soft_labels()
        cases = [
            (self.tester.labels(), F.cross_entropy(logits, self.tester.labels())),
            (multi_hot, F.binary_cross_entropy_with_logits(logits, multi_hot.float())),
            (soft, F.cross_entropy(logits, soft)),
        ]
        for labels, expected in cases:
            torch.testing.assert_close(model(pixel_values, labels=labels).loss, expected)
            assert model.config.problem_type is None
        model.config.problem_type = "single_label_classification"
        torch.testing.assert_close(model(pixel_values, labels=soft).loss, F.cross_entropy(logits, soft))

        regression = self.tester.create_model(num_labels=1).eval()
        targets = torch.randn(3)
        outputs = regression(pixel_values, labels=targets)
        torch.testing.assert_close(outputs.loss, F.mse_loss(outputs.logits.squeeze(-1), targets))
        torch.testing.assert_close(
            outputs.loss, ForSequenceClassificationLoss(targets, outputs.logits, copy.deepcopy(regression.config))
        )
        assert regression.config.problem_type is None

    def test_bad_labels_and_empty_batches_fail_clearly(self):
        model = self.tester.create_model().eval()
        pixel_values = self.tester.pixel_values()
        with pytest.raises(ValueError, match=r"labels must lie in \[0, 5\)"):
            model(pixel_values, labels=torch.tensor([0, 5, 1]))
        with pytest.raises(ValueError, match="soft labels must have the logits' shape"):
            model(pixel_values, labels=torch.rand(3, 7))
        with pytest.raises(ValueError, match="got 2 labels for 3 images"):
            model(pixel_values, labels=torch.tensor([0, 1]))
        # No loss (torch's mean over nothing is NaN) and no logits (ViT fails inside a reshape) for no images.
        empty = self.tester.pixel_values(0)
        for labels in (None, torch.zeros(0, dtype=torch.long)):
            with pytest.raises(ValueError, match="a batch of 0"):
                model(empty, labels=labels)
        with pytest.raises(ValueError, match="a batch of 0 images"):
            model.loss_function(torch.zeros(0, dtype=torch.long), torch.zeros(0, 5), model.config)
        # transformers' convention: -100 marks a sample without a label.
        labels = torch.tensor([1, -100, 2])
        logits = model(pixel_values).logits
        torch.testing.assert_close(model(pixel_values, labels=labels).loss, F.cross_entropy(logits, labels))

    def test_pixel_values_are_cast_and_raw_pixels_refused(self):
        model = self.tester.create_model().eval()
        pixel_values = self.tester.pixel_values()
        expected = model(pixel_values).logits
        torch.testing.assert_close(model(pixel_values.double()).logits, expected)
        half = pixel_values.half()
        torch.testing.assert_close(model(half).logits, model(half.float()).logits)
        for raw in ((pixel_values * 50 + 128).clamp(0, 255).to(torch.uint8), pixel_values.long()):
            with pytest.raises(ValueError, match=r"image processor.*divide by 255"):
                model(raw)

    # ---- saving, loading, transformers' machinery -----------------------------------------------------

    def test_save_and_load_give_bit_exact_logits(self, tmp_path):
        model = self.tester.create_model()
        model.train()
        model(self.tester.pixel_values())  # move BN statistics away from their initial values
        model.eval()
        model.save_pretrained(tmp_path)
        # a timm folder has no preprocessor file: transformers builds timm's processor from config.json
        files = {"config.json", "model.safetensors"} | (set() if self.tester.is_timm else {"preprocessor_config.json"})
        assert files <= set(os.listdir(tmp_path))
        loaded = AutoModelForImageClassification.from_pretrained(tmp_path).eval()
        assert type(loaded) is type(model)
        pixel_values = self.tester.pixel_values()
        with torch.no_grad():
            assert torch.equal(model(pixel_values).logits, loaded(pixel_values).logits)
        processor = AutoImageProcessor.from_pretrained(tmp_path)
        assert self.tester.image_mean(processor) == pytest.approx(model.config.image_mean)

    def test_config_round_trip(self, tmp_path):
        config = self.tester.create_model().config
        config.save_pretrained(tmp_path)
        reloaded = AutoConfig.from_pretrained(tmp_path)
        assert type(reloaded) is type(config)
        drop = {"_name_or_path"}
        assert {k: v for k, v in reloaded.to_dict().items() if k not in drop} == {
            k: v for k, v in config.to_dict().items() if k not in drop
        }

    def test_one_hidden_state_per_block_with_kinds(self):
        model = self.tester.create_model().eval()
        kinds = alternet_hf.block_kinds(model)
        pixel_values = self.tester.pixel_values()
        states, logits = alternet_hf.block_states(model, pixel_values)
        assert len(states) == len(kinds)
        assert kinds[0] == "stem" and kinds[-1] == "head"
        assert set(kinds) <= set(alternet_hf.BLOCK_KINDS)
        assert all(state.shape[0] == 3 for state in states)
        torch.testing.assert_close(logits, model(pixel_values).logits)
        config = model.config
        if self.tester.is_timm:  # the reference's cut: two blocks per transformer layer, the stages' pools between
            layers = sum(config.model_args.get("depth", config.model_args.get("depths", [])))
            stages = len(config.model_args.get("depth", config.model_args.get("depths", [])))
            assert kinds.count("msa") == kinds.count("mlp") == layers and kinds.count("pool") == stages - 1
            assert len(states) == 2 * layers + stages + 1
        elif not self.tester.ours:
            assert kinds[1:-1] == ["msa", "mlp"] * config.num_hidden_layers
            assert all(state.shape == (3, 1 + (16 // 4) ** 2, 24) for state in states)
        else:
            assert len(states) == sum(config.depths) + 2
            assert kinds.count("msa") == sum(getattr(config, "num_attention_blocks", [0]))

    def test_auto_classes(self):
        model = self.tester.create_model()
        config = model.config
        assert type(AutoConfig.for_model(config.model_type)) is type(config)
        base = AutoModel.from_config(config)
        classifier = AutoModelForImageClassification.from_config(config)
        assert base.main_input_name == classifier.main_input_name == "pixel_values"
        assert type(classifier) is type(model)

    def test_pipeline_on_a_real_photo(self, tmp_path, photo):
        self.tester.create_model().save_pretrained(tmp_path)
        classify = pipeline("image-classification", model=str(tmp_path))
        predictions = classify(photo, top_k=3)
        assert len(predictions) == 3
        assert all(0.0 <= p["score"] <= 1.0 for p in predictions)
        assert predictions[0]["score"] >= predictions[-1]["score"]
        assert classify(photo.convert("L"))  # grayscale photos work too

    def test_mismatched_head_is_freshly_initialised(self, tmp_path):
        self.tester.create_model().save_pretrained(tmp_path)
        model = AutoModelForImageClassification.from_pretrained(tmp_path, num_labels=7, ignore_mismatched_sizes=True)
        classifier = self.tester.classifier(model)
        weight, bias = classifier.weight, classifier.bias
        assert weight.shape[0] == 7 and torch.isfinite(weight).all() and torch.isfinite(bias).all()
        if self.tester.is_timm:  # transformers' init of a timm head: N(0, initializer_range²), as timm's own
            assert weight.std().item() == pytest.approx(model.config.initializer_range, rel=0.5)
        else:  # torch's default Linear init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) — neither zeros nor garbage.
            bound = 1 / weight.shape[1] ** 0.5
            assert 0 < weight.abs().max() <= bound + 1e-6 and weight.std() > bound / 10
        again = alternet_hf.create_model(str(tmp_path), num_labels=7)
        assert again.config.num_labels == 7 and len(again.config.id2label) == 7

    def test_bfloat16_load(self, tmp_path):
        model = self.tester.create_model().eval()
        model.save_pretrained(tmp_path)
        pixel_values, labels = self.tester.pixel_values(), self.tester.labels()
        loaded = [
            AutoModelForImageClassification.from_pretrained(tmp_path, dtype=torch.bfloat16),
            alternet_hf.create_model(str(tmp_path), dtype=torch.bfloat16),
        ]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # transformers 5 renamed it `dtype`
            loaded.append(AutoModelForImageClassification.from_pretrained(tmp_path, torch_dtype=torch.bfloat16))
        for half in loaded:
            assert {p.dtype for p in half.parameters()} == {torch.bfloat16}
            outputs = half.eval()(pixel_values, labels=labels)  # float32 input, cast by the model
            assert outputs.logits.dtype == torch.bfloat16 and torch.isfinite(outputs.loss)
            torch.testing.assert_close(outputs.logits.float(), model(pixel_values).logits, rtol=0.05, atol=0.05)
        outputs.loss.backward()

    def test_loads_with_remote_code_without_the_package(self, tmp_path, user_without_the_package):
        model = self.tester.create_model().eval()
        model.save_pretrained(tmp_path, remote_code=True)
        if not self.tester.ours:  # transformers' own class: nothing to copy, it loads with transformers alone
            assert "auto_map" not in json.loads((tmp_path / "config.json").read_text())
            assert not list(tmp_path.glob("*.py"))
            pixel_values = self.tester.pixel_values()
            reloaded = AutoModelForImageClassification.from_pretrained(tmp_path).eval()
            torch.testing.assert_close(reloaded(pixel_values).logits, model(pixel_values).logits)
            return
        config = json.loads((tmp_path / "config.json").read_text())
        assert set(config["auto_map"]) == {"AutoConfig", "AutoModel", "AutoModelForImageClassification"}
        # The repo's code is the package's files as they are, wherever the package keeps them: nothing rewritten.
        copied = {path.name: path.read_bytes() for path in tmp_path.glob("*.py")}
        package = Path(sys.modules[type(model).__module__].__file__).parent
        assert {"modeling_common.py", "configuration_common.py"} < set(copied)
        assert copied == {name: (package / name).read_bytes() for name in copied}
        assert "auto_map" not in model.config.to_dict()  # the live config is left as it was
        pixel_values = self.tester.pixel_values()
        torch.save(pixel_values, tmp_path / "input.pt")
        with torch.no_grad():
            torch.save(model(pixel_values).logits, tmp_path / "expected.pt")
        script = textwrap.dedent(
            f"""
            import torch
            from transformers import AutoModelForImageClassification
            model = AutoModelForImageClassification.from_pretrained({str(tmp_path)!r}, trust_remote_code=True).eval()
            assert "alternet_hf" not in type(model).__module__, type(model).__module__
            with torch.no_grad():
                logits = model(torch.load({str(tmp_path / "input.pt")!r}, weights_only=True)).logits
            assert torch.equal(logits, torch.load({str(tmp_path / "expected.pt")!r}, weights_only=True))
            model.gradient_checkpointing_enable()  # the copied files carry the whole contract
            model.train()(torch.randn(2, 3, 16, 16), labels=torch.rand(2, 5).softmax(-1)).loss.backward()
            print("remote code OK")
            """
        )
        answer = user_without_the_package(script)
        assert answer["ok"], answer["error"][-3000:]
        assert "remote code OK" in answer["stdout"]

    # ---- memory and deployment -------------------------------------------------------------------------

    def test_gradient_checkpointing_gives_the_plain_gradients(self):
        """Same loss, gradients and batch-norm statistics with checkpointed blocks (stochastic depth on: the
        recomputation must draw the same masks)."""
        model = self.tester.create_model(drop_path_rate=0.5).train()
        pixel_values, labels = self.tester.pixel_values(4), self.tester.soft_labels(4)
        plain, checkpointed = copy.deepcopy(model), copy.deepcopy(model)
        if not model.supports_gradient_checkpointing:  # timm's PiT: refused, not ignored
            assert self.tester.preset.startswith("pit")
            with raises_from(ValueError, "transformers"):
                checkpointed.activation_checkpointing_enable()
            assert not any(getattr(m, "grad_checkpointing", False) for m in checkpointed.modules())
            return
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # now an alias of activation_checkpointing_enable
            checkpointed.gradient_checkpointing_enable()
        if self.tester.is_timm:  # timm's switch, per stage
            stages = [m for m in checkpointed.modules() if hasattr(m, "grad_checkpointing")]
            assert stages and all(stage.grad_checkpointing for stage in stages)
        else:
            layers = [m for m in checkpointed.modules() if isinstance(m, GradientCheckpointingLayer)]
            assert layers and all(layer.gradient_checkpointing for layer in layers)
        for net in (plain, checkpointed):
            torch.manual_seed(1)
            net(pixel_values, labels=labels).loss.backward()
        for (name, a), b in zip(plain.named_parameters(), checkpointed.parameters()):
            torch.testing.assert_close(a.grad, b.grad, rtol=0, atol=0, msg=name)
        for (name, a), b in zip(plain.named_buffers(), checkpointed.buffers()):
            assert torch.equal(a, b), name

    def test_offload_with_a_device_map(self, tmp_path):
        """`device_map="auto"` under a memory cap (the rest goes to disk), and a whole model on disk.

        Not for timm's modules: transformers' TimmWrapper leaves the buffers timm computes at build time (PiT's,
        Swin's attention masks) on the meta device when it loads with a device map. Checked to fail loudly, so
        that the day transformers fixes it this test says so."""
        model = self.tester.create_model().eval()
        model.save_pretrained(tmp_path / "model")
        if self.tester.is_timm:
            with raises_from((NotImplementedError, ValueError), "transformers", "accelerate", "torch"):
                AutoModelForImageClassification.from_pretrained(tmp_path / "model", device_map={"": "disk"})(
                    self.tester.pixel_values()
                )
            return
        pixel_values = self.tester.pixel_values()
        with torch.no_grad():
            expected = model(pixel_values).logits
        # Room for most of the weights: accelerate keeps space for the largest block it may load back from disk.
        most_weights = sum(p.numel() * p.element_size() for p in model.parameters()) * 3 // 4
        for device_map, max_memory in (("auto", {"cpu": most_weights}), ({"": "disk"}, None)):
            offloaded = AutoModelForImageClassification.from_pretrained(
                tmp_path / "model", device_map=device_map, max_memory=max_memory, offload_folder=tmp_path / "offload"
            )
            places = set(offloaded.hf_device_map.values())
            assert "disk" in places and (device_map != "auto" or "cpu" in places), offloaded.hf_device_map
            with torch.no_grad():
                torch.testing.assert_close(offloaded(pixel_values).logits, expected)

    def test_torch_export_and_onnx_with_a_static_and_a_dynamic_batch(self, tmp_path):
        """`torch.export` and torch's default ONNX exporter (dynamo), run by onnxruntime."""
        import onnxruntime

        model = self.tester.create_model().eval()
        pixel_values = self.tester.pixel_values(2)
        batch = torch.export.Dim("batch")
        exported = torch.export.export(model, (pixel_values,), dynamic_shapes=({0: batch},))
        other_batch = self.tester.pixel_values(3)
        with torch.no_grad():
            torch.testing.assert_close(exported.module()(other_batch).logits, model(other_batch).logits)

        for name, program in (("static", model), ("dynamic", exported)):
            path = tmp_path / f"{name}.onnx"
            with contextlib.redirect_stdout(io.StringIO()):  # the exporter reports its steps on stdout
                torch.onnx.export(program, (pixel_values,), path, input_names=["pixel_values"], output_names=["logits"])
            session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
            for inputs in [pixel_values] + ([self.tester.pixel_values(1), other_batch] if name == "dynamic" else []):
                (logits,) = session.run(["logits"], {"pixel_values": inputs.numpy()})
                with torch.no_grad():
                    torch.testing.assert_close(torch.from_numpy(logits), model(inputs).logits, rtol=1e-4, atol=1e-5)

    # ---- the HF Trainer --------------------------------------------------------------------------------

    @pytest.mark.parametrize("targets, checkpointing", [("hard", False), ("soft", True)])
    def test_trainer_step_is_the_replayed_step(self, targets, checkpointing, tmp_path):
        """Two optimizer steps of the `Trainer`, each accumulating two micro-batches, equal a hand-written replay
        with torch's cross-entropy: on class indices, and on soft targets (with gradient checkpointing on,
        through `TrainingArguments`), for every family, ViT included."""
        model = self.tester.create_model()
        for module in model.modules():  # stochastic depth off: the replay below must see the same network
            if isinstance(module, DropPath):
                module.rate = 0.0
        checkpointing = checkpointing and model.supports_gradient_checkpointing  # not timm's PiT
        pixel_values = self.tester.pixel_values(8)
        labels = self.tester.labels(8) if targets == "hard" else self.tester.soft_labels(8)
        data = [{"pixel_values": x, "labels": y} for x, y in zip(pixel_values, labels)]

        trained = _train(
            copy.deepcopy(model), data, tmp_path, batch_size=2, accumulation=2, checkpointing=checkpointing
        )
        if checkpointing:
            assert all(m.gradient_checkpointing for m in trained.modules() if isinstance(m, GradientCheckpointingLayer))

        replay = copy.deepcopy(model).train()
        optimizer = torch.optim.SGD(replay.parameters(), lr=0.1)
        for step in range(2):
            optimizer.zero_grad()
            for micro in range(2):
                start = 4 * step + 2 * micro
                logits = replay(pixel_values[start : start + 2]).logits
                (F.cross_entropy(logits, labels[start : start + 2]) / 2).backward()
            optimizer.step()
        for (name, a), b in zip(trained.state_dict().items(), replay.state_dict().values()):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
        assert trained.config.problem_type is None

        if not self.tester.batch_norm:  # no batch statistics: accumulation equals the doubled batch exactly
            doubled = _train(copy.deepcopy(model), data, tmp_path, batch_size=4, accumulation=1)
            for (name, a), b in zip(trained.state_dict().items(), doubled.state_dict().values()):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


class _SequentialTrainer(Trainer):
    """Fixed sample order, so the run can be replayed by hand."""

    def _get_train_sampler(self, *args, **kwargs):
        return SequentialSampler(self.train_dataset)


def _train(model, data, tmp_path, *, batch_size, accumulation, checkpointing=False):
    with warnings.catch_warnings():
        # transformers 5.2x renames `gradient_checkpointing` (the argument, and the method the Trainer calls).
        warnings.simplefilter("ignore", FutureWarning)
        args = TrainingArguments(
            output_dir=str(tmp_path),
            per_device_train_batch_size=batch_size,
            gradient_accumulation_steps=accumulation,
            gradient_checkpointing=checkpointing,
            max_steps=2,
            learning_rate=0.1,
            optim="sgd",
            lr_scheduler_type="constant",
            max_grad_norm=0.0,
            weight_decay=0.0,
            use_cpu=True,
            report_to=[],
            save_strategy="no",
            logging_strategy="no",
            dataloader_num_workers=0,
            seed=0,
            disable_tqdm=True,
        )
        _SequentialTrainer(model=model, args=args, train_dataset=data).train()
    return model


class TestAlterNetBottleneck(ModelContractMixin):
    tester = ModelTester("alternet-50-cifar100")


class TestAlterNetBasic(ModelContractMixin):
    tester = ModelTester("alternet-18-cifar10")


class TestCifarResNet(ModelContractMixin):
    tester = ModelTester("resnet-50-cifar100")


class TestViT(ModelContractMixin):
    tester = ModelTester("vit-ti-cifar100", ours=False, batch_norm=False)


class TestPiT(ModelContractMixin):
    tester = ModelTester("pit-ti-cifar100", ours=False, batch_norm=False)


class TestSwin(ModelContractMixin):
    tester = ModelTester("swin-ti-cifar100", ours=False, batch_norm=False)
