"""timm's own model tests, run on the zoo's timm names: the functions of `tests/test_models.py` from the source
distribution of the installed timm (fetched by `upstream.sdist_tests`, never copied here), called as timm's
parametrisation calls them for its own families.

Compute tests run on the small architectures of every family at both input sizes (`COMPUTE_NAMES`); the cfg
tests, which build on the meta device, run on every name with its tags. `NOT_APPLICABLE` says why the rest of
timm's per-model tests do not apply; `test_every_timm_model_test_is_run_or_excused` fails when a new timm adds a
test that selects our names and is in neither list.
"""

import inspect
import warnings

import pytest
import torch
from upstream import import_file, sdist_tests

import alternet_hf  # noqa: F401  (registers the zoo with timm when timm is imported)

timm = pytest.importorskip("timm")
from alternet_hf.models.timm_models import register_models  # noqa: E402

ALL_NAMES = register_models()  # with tags: alternet_18.cifar100, alternet_18_224.in1k, ...
COMPUTE_NAMES = ["alternet_18", "alternet_18_224", "resnet_18", "resnet_18_224", "vit_ti", "vit_ti_224"]
CNN_NAMES = [name for name in COMPUTE_NAMES if not name.startswith("vit")]
NON_STD = ("vit", "pit")  # names timm's NON_STD_FILTERS match ('vit_*', 'pit_*'): its "non-standard" models

# timm's test -> (our names, extra arguments after model_name). timm selects the names of the first group by its
# own filters (ViT names are its "non-standard" models); the feature-API and pruning tests it runs on the model
# files it lists by module name, and the rest on fixed timm names: we run those on ours as well.
SELECTED_BY_TIMM = {
    "test_model_forward": (COMPUTE_NAMES, (1,)),
    "test_model_backward": (COMPUTE_NAMES, (2,)),
    "test_model_forward_features": (CNN_NAMES, (1,)),
    "test_model_forward_fx": (COMPUTE_NAMES, (1,)),
    "test_model_backward_fx": (COMPUTE_NAMES, (2,)),
    "test_model_default_cfgs": ([name for name in ALL_NAMES if not name.startswith(NON_STD)], (1, "meta")),
    "test_model_default_cfgs_non_std": ([name for name in ALL_NAMES if name.startswith(NON_STD)], (1, "meta")),
}
OPTED_IN = {
    "test_model_forward_intermediates_features": (COMPUTE_NAMES, (1,)),
    "test_model_forward_intermediates": (COMPUTE_NAMES, (1,)),
    "test_prune_intermediate_layers_contract": (COMPUTE_NAMES, ()),
    "test_prune_intermediate_layers_params_used": (COMPUTE_NAMES, ()),
    # AlterNet's and ViT's features end in a final norm, so at the last index they are the tap normalised (as in
    # timm's ResNetV2 and ViT, which timm does not run this test on either)
    "test_forward_after_prune_intermediate_layers": (["resnet_18", "resnet_18_224"], ()),
    "test_prune_intermediate_layers_last_feature": (CNN_NAMES, (True,)),  # 96×96 images: not for fixed-size ViT
    "test_prune_to_stem_feature": (CNN_NAMES, ()),
    "test_head_hidden_size": (CNN_NAMES, ({},)),
    "test_reset_classifier_keeps_pool": (CNN_NAMES, ()),
    "test_catavgmax_unsupported": (["vit_ti"], ()),
}
# Not run from timm's fixed-name tests: test_features_only_grad_checkpointing_backward (timm's FeatureGetterNet, the
# features_only wrapper of every forward_intermediates model, has no set_grad_checkpointing; the model's own is
# tested below), and those about other families' modules.
NOT_APPLICABLE = {
    "test_model_forward_torchscript": "TorchScript: the zoo models are transformers models, which do not script "
    "(timm excludes such families by name, EXCLUDE_JIT_FILTERS); torch.export and ONNX are tested instead",
    "test_model_forward_fx_torchscript": "TorchScript of the fx graph, as above",
    "test_model_inference": "needs timm's test weights from the Hub; the zoo names have no published weights",
    "test_model_load_pretrained": "pretrained=True: the zoo publishes no timm weights (list_pretrained has none)",
    "test_model_features_pretrained": "pretrained=True, as above",
}


@pytest.fixture(scope="module")
def timm_tests():
    return import_file(sdist_tests("timm") / "test_models.py", f"timm_{timm.__version__.replace('.', '_')}_test_models")


def _cases(groups: dict) -> list:
    return [
        pytest.param(test, name, arguments, id=f"{test}[{name}]")
        for test, (names, arguments) in groups.items()
        for name in names
    ]


def _timm_test(timm_tests, test: str):
    assert hasattr(timm_tests, test), f"timm {timm.__version__}'s tests/test_models.py has no {test}: list it no more"
    return getattr(timm_tests, test)


def _run(timm_tests, test: str, name: str, arguments: tuple) -> None:
    """timm's `test` on `name`; a failure names the timm version whose test it is."""
    try:
        _timm_test(timm_tests, test)(name, *arguments)
    except (Exception, pytest.fail.Exception) as error:  # pytest.fail's is no Exception
        if hasattr(error, "add_note"):  # Python 3.11 and later
            error.add_note(f"in {test} of timm {timm.__version__}'s tests/test_models.py, on {name}")
        raise


@pytest.mark.parametrize("test, name, arguments", _cases(SELECTED_BY_TIMM))
def test_timm_selects_and_passes(timm_tests, test, name, arguments):
    selected = _selected_names(_timm_test(timm_tests, test))
    assert name in selected, f"timm {timm.__version__}'s {test} no longer selects {name}: move it to the right group"
    _run(timm_tests, test, name, arguments)


@pytest.mark.parametrize("test, name, arguments", _cases(OPTED_IN))
def test_timm_feature_and_pruning_contract(timm_tests, test, name, arguments):
    _run(timm_tests, test, name, arguments)


def test_every_timm_model_test_is_run_or_excused(timm_tests):
    """Every test of timm's file whose own parametrisation selects a zoo name is run above or excused."""
    zoo = set(ALL_NAMES) | {name.split(".")[0] for name in ALL_NAMES}
    selecting = {
        name
        for name, function in vars(timm_tests).items()
        if name.startswith("test_") and inspect.isfunction(function) and _selected_names(function) & zoo
    }
    unaccounted = selecting - set(SELECTED_BY_TIMM) - set(OPTED_IN) - set(NOT_APPLICABLE)
    assert not unaccounted, (
        f"timm {timm.__version__} runs {sorted(unaccounted)} on every model; we neither run nor excuse them"
    )
    dropped = set(SELECTED_BY_TIMM) - selecting
    assert not dropped, f"timm {timm.__version__} no longer runs {sorted(dropped)} on the zoo's names"


PARAM = type(pytest.param(None))  # pytest's ParameterSet


def _selected_names(function) -> set[str]:
    """The model names of timm's own parametrisation of a test, however it writes it: `("model_name", names)`,
    `("model_name,img_size", pairs)` or `argnames=`, each value bare or a `pytest.param`."""
    names = set()
    for mark in getattr(function, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        arguments = dict(zip(("argnames", "argvalues"), mark.args)) | mark.kwargs
        argnames = arguments["argnames"]
        if isinstance(argnames, str):
            argnames = [argname.strip() for argname in argnames.split(",") if argname.strip()]
        if "model_name" not in argnames:
            continue
        position = list(argnames).index("model_name")
        for value in arguments["argvalues"]:
            if isinstance(value, PARAM):
                value = value.values
            elif len(argnames) == 1:
                value = (value,)
            if isinstance(value[position], str):
                names.add(value[position])
    return names


def test_a_timm_model_of_the_zoo_keeps_devices_dtypes_and_modes_through_resets():
    """`reset_classifier` in any order on any dtype builds the head where the model lives (timm's contract)."""
    model = timm.create_model("alternet_18").double().eval()
    model.reset_classifier(0)
    model.reset_classifier(10)
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    assert model(x).dtype == torch.float64 and model(x).shape == (2, 10)
    assert not model.get_classifier().training


@pytest.mark.parametrize("name", ["alternet_18", "resnet_18"])
def test_fx_feature_extractor_gives_the_getters_features(name):
    """`features_only=True, feature_cls="fx"` (a traced graph cut at the feature modules) equals the default."""
    x = torch.randn(2, 3, 32, 32)
    torch.manual_seed(0)
    getter = timm.create_model(name, features_only=True).eval()
    torch.manual_seed(0)
    with warnings.catch_warnings():  # torchvision notes that DropPath adds nodes in train mode
        warnings.filterwarnings("ignore", "The nodes obtained by tracing the model in eval mode")
        traced = timm.create_model(name, features_only=True, feature_cls="fx").eval()
    assert type(traced).__name__ == "FeatureGraphNet"
    with torch.no_grad():
        for expected, actual in zip(getter(x), traced(x), strict=True):
            torch.testing.assert_close(actual, expected, rtol=0, atol=0)


@pytest.mark.parametrize("name", ["alternet_18", "vit_ti"])
def test_grad_checkpointing_gives_the_plain_gradients(name):
    """`set_grad_checkpointing()` (the zoo model's own, block by block) changes memory, not gradients."""
    x = torch.randn(2, 3, 32, 32)
    gradients = []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        model = timm.create_model(name, drop_path_rate=0.1).train()
        model.set_grad_checkpointing(checkpointing)
        torch.manual_seed(1)
        model(x).pow(2).mean().backward()
        gradients.append({n: p.grad for n, p in model.named_parameters()})
    assert gradients[0].keys() == gradients[1].keys() and all(g is not None for g in gradients[1].values())
    for key, expected in gradients[0].items():
        torch.testing.assert_close(gradients[1][key], expected, msg=key)
