"""transformers' own common model tests (`ModelTesterMixin` of `tests/test_modeling_common.py`, from the source
distribution of the installed transformers: `upstream.transformers_modeling_common`), run on our two model
classes with testers written as transformers writes its ResNet tester.

Every test of the mixin runs, as a pytest item of its own, except those that transformers itself skips for these
models (no text inputs, ...: checked still to skip), those its decorators skip on this machine (no GPU, no Flash
Attention, ...: checked to be about something this machine lacks, `LACKED`), and `NOT_APPLICABLE`. A failure names
the transformers version that changed. ViT is transformers' own class, tested by transformers.
"""

import copy
import fnmatch
import importlib.util
import os
import re
import tempfile
import unittest
from collections.abc import Callable
from typing import NamedTuple
from unittest import mock

import pytest
import torch
import transformers
from conftest import TINY
from safetensors.torch import save_file
from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES, MODEL_MAPPING_NAMES
from upstream import transformers_modeling_common

import alternet_hf
from alternet_hf.models.modeling_alternet import AlterNetForImageClassification, AlterNetModel
from alternet_hf.models.modeling_cifar_resnet import CifarResNetForImageClassification, CifarResNetModel

common = transformers_modeling_common()


class ZooModelTester:
    """A tiny configuration of one zoo preset (conftest.TINY) and random images, for `ModelTesterMixin`.

    For AlterNet, the attention shape that `test_attention_outputs` checks: one map per MSA block
    (`num_hidden_layers` of them), `(..., heads, p², p²)` with p² the window's tokens (`seq_length`)."""

    def __init__(self, parent, preset: str, batch_size: int = 3):
        self.parent = parent
        self.preset = preset
        self.batch_size = batch_size
        self.num_channels = 3
        self.image_size = TINY[preset]["image_size"]
        self.num_labels = TINY[preset]["num_labels"]
        self.is_training = True
        config = self.get_config()
        if config.model_type == "alternet":
            layouts = config.stage_layouts()
            first_msa_stage = next(i for i, layout in enumerate(layouts) if "msa" in layout)
            self.num_hidden_layers = sum(layout.count("msa") for layout in layouts)
            self.num_attention_heads = config.num_attention_heads[first_msa_stage]
            self.seq_length = config.window_size**2

    def get_config(self):
        return alternet_hf.create_config(self.preset, **TINY[self.preset])

    def prepare_config_and_inputs(self):
        shape = [self.batch_size, self.num_channels, self.image_size, self.image_size]
        pixel_values = common.floats_tensor(shape)
        labels = common.ids_tensor([self.batch_size], self.num_labels)
        return self.get_config(), pixel_values, labels

    def prepare_config_and_inputs_for_common(self):
        config, pixel_values, _ = self.prepare_config_and_inputs()
        return config, {"pixel_values": pixel_values}


class _ZooCommonTest(common.ModelTesterMixin, unittest.TestCase):
    """transformers' mixin with the two overrides transformers' own CNN tests make, and one for a zoo behaviour."""

    __test__ = False  # run one method at a time by `test_transformers_common_test`
    preset: str
    test_resize_embeddings = False

    def setUp(self):
        self.model_tester = ZooModelTester(self, self.preset)
        # transformers' tests read its warnings (e.g. "Reinit due to size mismatch"); our conftest quiets them
        verbosity = transformers.logging.get_verbosity()
        transformers.logging.set_verbosity_warning()
        self.addCleanup(transformers.logging.set_verbosity, verbosity)
        # The tests tell base models from heads (which get labels) by transformers' own name tables, which list
        # the models inside transformers: ours are listed as they would be there.
        base, head = self.all_model_classes
        model_type = self.model_tester.get_config().model_type
        for table, name in (
            (MODEL_MAPPING_NAMES, base.__name__),
            (MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES, head.__name__),
        ):
            patcher = mock.patch.dict(table, {model_type: name})
            patcher.start()
            self.addCleanup(patcher.stop)

    def test_hidden_states_output(self):
        """One feature map per block (the zoo's `block_kinds`: stem, every block, head input), asked for by
        argument or by the config; the mixin's version expects token sequences (B, L, D)."""
        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        size = self.model_tester.image_size
        for model_class in self.all_model_classes:
            for through_config in (False, True):
                config.output_hidden_states = through_config
                model = model_class(copy.deepcopy(config)).eval()
                with torch.no_grad():
                    outputs = model(**inputs, **({} if through_config else {"output_hidden_states": True}))
                self.assertEqual(len(outputs.hidden_states), len(model.block_kinds()))
                self.assertEqual(tuple(outputs.hidden_states[0].shape), (3, config.embedding_size, size, size))

    def test_model_weights_reload_no_missing_tied_weights(self):
        """The mixin loads a checkpoint with every weight removed and counts the missing ones in the loading
        info; a zoo model refuses such a checkpoint instead (a missing backbone weight is an error, not a
        warning: `ZooModelMixin.from_pretrained`), naming how many of its weights are missing."""
        for model_class in self.all_model_classes:
            config, _ = self.model_tester.prepare_config_and_inputs_for_common()
            model = model_class(config)
            with tempfile.TemporaryDirectory() as folder:
                model.save_pretrained(folder)
                save_file(
                    {"tensor": torch.tensor([1, 2])},
                    os.path.join(folder, "model.safetensors"),
                    metadata={"format": "pt"},
                )
                expected = sum(1 for key in model.state_dict() if not key.startswith("classifier."))
                with self.assertRaisesRegex(
                    ValueError, f"the checkpoint lacks {expected} weights of {model_class.__name__}"
                ):
                    model_class.from_pretrained(folder)


class AlterNetCommonTest(_ZooCommonTest):
    preset = "alternet-50-cifar100"
    all_model_classes = (AlterNetModel, AlterNetForImageClassification)
    has_attentions = True


class CifarResNetCommonTest(_ZooCommonTest):
    preset = "resnet-50-cifar100"
    all_model_classes = (CifarResNetModel, CifarResNetForImageClassification)
    has_attentions = False


FAMILIES = {"alternet": AlterNetCommonTest, "cifar_resnet": CifarResNetCommonTest}

# Tests we do not run, as transformers' own vision models do not: they test token embeddings.
NOT_APPLICABLE = {
    "test_model_get_set_embeddings": "asserts an nn.Embedding input layer; images have none (transformers' ResNet "
    "and ConvNeXt tests skip it too)",
}
# Tests transformers itself skips for these models when it runs them, by what the model lacks (its own reasons,
# checked by `test_transformers_skips_only_what_the_zoo_lacks`): text inputs and embeddings, RoPE, caches, experts,
# language-model heads, sub-configs, tensor-parallel plans, fp32-kept modules, grouped matmuls, weight-name
# conversions; and, for the ResNet, attention.
SKIPPED_BY_TRANSFORMERS = [
    "test_attn_implementation_composite_models",
    "test_bc_cache_name_forward",
    "test_can_capture_specific_layers_hidden_states",
    "test_can_init_all_missing_weights",
    "test_can_load_from_already_mapped_keys",
    "test_can_set_attention_dynamically_composite_model",
    "test_capture_outputs_decorator",
    "test_causal_lm_loss_honors_shift_labels",
    "test_eager_matches_batched_and_grouped_inference_*",
    "test_enable_input_require_grads_with_gradient_checkpointing",
    "test_encoder_decoder_loss_no_double_shift",
    "test_inputs_embeds*",
    "test_internal_model_config_and_subconfig_are_same",
    "test_keep_in_fp32_modules*",
    "test_model_rope_*",
    "test_moe_models_record_router_logits",
    "test_output_router_logits_from_config",
    "test_resize_embeddings_untied*",
    "test_resize_position_vector_embeddings",
    "test_resize_tokens_embeddings",
    "test_reverse_loading_mapping",
    "test_sdpa_can_dispatch_composite_models",
    "test_sliding_window_mask",
    "test_tp_plan_matches_params",
    "test_vision_axial_rope",
]
SKIPPED_WITHOUT_ATTENTION = [
    "test_attention_outputs",
    "test_can_set_attention_dynamically",
    "test_eager_matches_sdpa_inference_*",
    "test_multimodal_outputs_are_returned",
    "test_sdpa_can_dispatch_non_composite_models",
]

TESTS = sorted(  # test_* flags are booleans, parameterized's bases None: only the callables are tests
    name for name in dir(_ZooCommonTest) if name.startswith("test_") and callable(getattr(_ZooCommonTest, name))
)
# Skipped by transformers' own decorators on this machine, for what it lacks (`LACKED`).
NEEDS_WHAT_WE_LACK = sorted(
    name for name in TESTS if getattr(getattr(_ZooCommonTest, name), "__unittest_skip__", False)
)


def _accelerators() -> int:
    """The devices torch can run on here besides the CPU (CUDA, XPU, NPU, HPU, MPS, ...)."""
    accelerator = getattr(torch, "accelerator", None)  # torch 2.6 and later
    count = accelerator.device_count() if accelerator is not None and accelerator.is_available() else 0
    return max(count, torch.cuda.device_count() if torch.cuda.is_available() else 0)


def _importable(*modules: str) -> bool:
    return any(importlib.util.find_spec(module) is not None for module in modules)


class Lacked(NamedTuple):
    """Something transformers skips tests for where it is missing: the words (a regular expression, any case) its
    skip reasons name it by, and how this machine is seen to lack it; `present` says what shows it is here. A reason
    that names several (Flash Attention on CUDA) is excused by any of them that this machine lacks."""

    name: str
    words: str
    lacked: Callable[[], bool]
    present: str


# Matched by topic rather than by sentence, so that a release that rewords a reason ("test requires CUDA" for
# "test requires accelerator") still passes, and a skip for what this machine has still fails.
LACKED = [
    Lacked(
        "an accelerator",
        r"\b(accelerators?|cuda|gpus?|[xnhmt]pus?|mlus?|rocm)\b",
        lambda: _accelerators() == 0,
        "torch sees an accelerator",
    ),
    Lacked(
        "several accelerators",
        r"(multiple|several|more than one|[2-9] or more|>= ?\d+) (\S+ )?(accelerator|gpu|[xnhmt]pu|device)"
        r"|\bmulti-?gpu",
        lambda: _accelerators() < 2,
        "torch sees several accelerators",
    ),
    Lacked(
        "Flash Attention",
        r"flash[ _-]?att",
        lambda: not _importable("flash_attn", "flash_attn_interface"),
        "flash_attn is importable",
    ),
    Lacked("DeepSpeed", r"deep[ _-]?speed", lambda: not _importable("deepspeed"), "deepspeed is importable"),
    Lacked("the kernels library", r"\bkernels\b", lambda: not _importable("kernels"), "kernels is importable"),
    Lacked("MPS", r"\b(mps|metal)\b", lambda: not torch.backends.mps.is_available(), "torch.backends.mps is available"),
    Lacked(
        "slow tests",
        r"\bslow\b",
        lambda: os.environ.get("RUN_SLOW", "").strip().lower() not in {"1", "y", "yes", "t", "true", "on"},
        "RUN_SLOW is set",
    ),
]


def _skipped_by_transformers(family: str) -> list[str]:
    patterns = SKIPPED_BY_TRANSFORMERS + ([] if FAMILIES[family].has_attentions else SKIPPED_WITHOUT_ATTENTION)
    return [test for test in TESTS if any(fnmatch.fnmatch(test, pattern) for pattern in patterns)]


def _run(family: str, test: str) -> unittest.TestResult:
    result = unittest.TestResult()
    FAMILIES[family](test).run(result)
    return result


@pytest.mark.parametrize(
    "family, test",
    [
        (family, test)
        for family in FAMILIES
        for test in TESTS
        if test not in NOT_APPLICABLE
        and test not in NEEDS_WHAT_WE_LACK
        and test not in _skipped_by_transformers(family)
    ],
)
def test_transformers_common_test(family, test):
    result = _run(family, test)
    problems = [trace for _, trace in result.errors + result.failures]
    assert not problems, f"transformers {transformers.__version__}'s {test} fails on {family}:\n{problems[0]}"
    assert not result.skipped, (
        f"transformers {transformers.__version__} skips {test} for {family}: {result.skipped[0][1]} "
        "(list it with its reason)"
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_transformers_skips_only_what_the_zoo_lacks(family):
    """The tests left out above still skip themselves for these models: a new transformers that runs one fails here."""
    for test in _skipped_by_transformers(family):
        result = _run(family, test)
        assert result.skipped and not result.errors + result.failures, (
            f"transformers {transformers.__version__} now runs {test} for {family}: run it here too"
        )


def test_the_tests_that_need_what_we_lack_are_transformers_own_skips():
    """Left out without running: each is skipped by transformers' decorators for something this machine lacks (a
    topic of `LACKED`, found in the reason's words, whichever sentence a release writes), never for what it has."""
    by_reason = {}
    for test in NEEDS_WHAT_WE_LACK:
        by_reason.setdefault(getattr(_ZooCommonTest, test).__unittest_skip_why__, []).append(test)
    problems = []
    for reason, tests in sorted(by_reason.items()):
        topics = [topic for topic in LACKED if re.search(topic.words, reason, re.IGNORECASE)]
        if not topics:
            problems.append(
                f"{tests}: skipped for {reason!r}, which names no topic of LACKED (add it if this machine lacks it)"
            )
        elif not any(topic.lacked() for topic in topics):
            about, here = (" and ".join(getattr(topic, field) for topic in topics) for field in ("name", "present"))
            problems.append(f"{tests}: skipped for {reason!r}, which is about {about}, yet here {here}")
    assert not problems, f"transformers {transformers.__version__} leaves out tests that should run:\n" + "\n".join(
        problems
    )
