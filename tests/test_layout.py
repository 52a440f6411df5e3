"""The layout's rules, read from the folders and the imports (CONTRIBUTING.md draws them): every module lives in a
room, a room imports only from rooms below it, no module imports itself through others, no private module (`_name`)
is imported from another top-level package, and the models' remote-code files import only each other."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
# The rooms, lowest first: a room may import its own modules and those of rooms on earlier lines, never those of a
# room on its own line or a later one. The maintainer's tools are the top: the benchmarks (which the release's
# estimates use), the release, then the scripts that run them.
LAYERS = (
    ("alternet_hf.utils",),
    ("alternet_hf.models", "alternet_hf.data", "alternet_hf.metrics"),
    ("alternet_hf.training",),
    ("alternet_hf.hub",),
    ("analysis",),
    ("alternet_hf.apps",),
    ("alternet_hf.cli",),
    ("zoo_benchmark",),
    ("zoo_release",),
    ("benchmark", "device_check", "release"),
)
# Measurements never train: of the engine's room, `analysis` reads only the recipes (the paper's augmentation).
ANALYSIS_READS_OF_TRAINING = ("alternet_hf.training", "alternet_hf.training.recipe")
# Copied next to the weights for `trust_remote_code=True` (`modeling_common.ZooModelMixin`): only each other.
REMOTE_CODE = ("alternet_hf.models.configuration_", "alternet_hf.models.modeling_")


def _modules() -> dict[str, Path]:
    """Every module of the packages and of the maintainer's tools (named as `scripts/` on `sys.path` names them)."""
    modules = {}
    for base, folders in ((ROOT, ("alternet_hf", "analysis")), (SCRIPTS, ("zoo_benchmark", "zoo_release"))):
        for folder in folders:
            for path in (base / folder).rglob("*.py"):
                name = ".".join(path.relative_to(base).with_suffix("").parts)
                modules[name.removesuffix(".__init__")] = path
    for path in SCRIPTS.glob("*.py"):
        modules[path.stem] = path
    return modules


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules `name` imports, anywhere in the file (function-level imports count too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            submodules = [f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in modules]
            candidates = submodules if node.module is None else [target, *submodules]
        else:
            continue
        found.update(c for c in candidates if c in modules and c != name)
    return found


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _room(name: str) -> str | None:
    """The room of a module: the longest room name it is in; None for `alternet_hf` itself (the package's face)."""
    rooms = [room for layer in LAYERS for room in layer if name == room or name.startswith(room + ".")]
    return max(rooms, key=len) if rooms else None


def _layer(room: str) -> int:
    return next(index for index, layer in enumerate(LAYERS) if room in layer)


def _circles(edges: dict[str, set[str]]) -> list[str]:
    state, path, circles = {}, [], []

    def visit(name):
        state[name] = "open"
        path.append(name)
        for target in sorted(edges.get(name, ())):
            if state.get(target) == "open":
                circles.append(" -> ".join(path[path.index(target) :] + [target]))
            elif target not in state:
                visit(target)
        path.pop()
        state[name] = "done"

    for name in sorted(edges):
        if name not in state:
            visit(name)
    return circles


def _wrong_way(graph: dict[str, set[str]]) -> list[str]:
    wrong = []
    for name, targets in graph.items():
        room = _room(name)
        for target in targets:
            target_room = _room(target)
            if room is None or target_room is None or target_room == room:
                continue
            if _layer(target_room) >= _layer(room):
                wrong.append(f"{name} -> {target} ({room} may not import {target_room})")
    return wrong


def test_every_module_lives_in_a_room():
    """`alternet_hf/` holds its `__init__` and its rooms (folders), each placed in LAYERS; nothing else."""
    loose = sorted(p.name for p in (ROOT / "alternet_hf").glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules outside a room: {loose}"
    rooms = sorted(f"alternet_hf.{p.parent.name}" for p in (ROOT / "alternet_hf").glob("*/__init__.py"))
    unplaced = [room for room in rooms if room not in {r for layer in LAYERS for r in layer}]
    assert not unplaced, f"rooms missing from LAYERS: {unplaced}"
    assert all(_room(name) for name in _modules() if name != "alternet_hf")


def test_no_module_imports_itself_through_others():
    # A package imports its own modules (its __init__ re-exports them); an edge into a package is an edge into its
    # __init__ only, which is not a circle through the module that imported it.
    edges = {name: {t for t in targets if not name.startswith(t + ".")} for name, targets in _graph().items()}
    circles = _circles(edges)
    assert not circles, "import circles:\n" + "\n".join(circles)


def test_rooms_import_only_downwards():
    wrong = _wrong_way(_graph())
    assert not wrong, "\n".join(wrong)


def test_the_measurements_never_train_and_the_package_never_runs_its_commands():
    wrong = []
    for name, targets in _graph().items():
        if name.startswith("analysis"):
            wrong += [
                f"{name} -> {t}"
                for t in targets
                if t.startswith("alternet_hf.training") and t not in ANALYSIS_READS_OF_TRAINING
            ]
        if name == "alternet_hf":
            wrong += [f"{name} -> {t}" for t in targets if t.startswith("alternet_hf.cli")]
    assert not wrong, "\n".join(wrong)


def test_no_private_module_is_imported_from_another_package():
    wrong = []
    for name, targets in _graph().items():
        for target in targets:
            private = any(part.startswith("_") and part != "__init__" for part in target.split("."))
            if private and target.split(".")[0] != name.split(".")[0]:
                wrong.append(f"{name} -> {target}")
    assert not wrong, "\n".join(wrong)


def test_the_remote_code_files_import_only_each_other():
    graph = _graph()
    remote = [name for name in graph if name.startswith(REMOTE_CODE)]
    assert len(remote) >= 6, remote
    wrong = [f"{name} -> {t}" for name in remote for t in graph[name] if not t.startswith(REMOTE_CODE)]
    assert not wrong, "\n".join(wrong)


def test_the_rules_see_the_imports():
    """The checks see function-level imports and would catch a circle, an upward import and a private one (a rule
    that sees nothing proves nothing)."""
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a -> b -> c -> a"]
    graph = _graph()
    assert "alternet_hf.data.augmentation" in graph["alternet_hf.training.recipe"]  # found at function level
    assert "alternet_hf.training.engine" in graph["alternet_hf.apps.evaluation"]
    assert "analysis.runner" in graph["alternet_hf.cli.analyze"]
    assert "zoo_benchmark.models" in graph["zoo_benchmark.device"]  # the tools are seen too
    assert _wrong_way({"alternet_hf.models.presets": {"alternet_hf.training.engine"}})
    assert _wrong_way({"alternet_hf.models.presets": {"alternet_hf.data.sources"}})  # same line: neither way
    assert not _wrong_way({"alternet_hf.apps.space": {"analysis.fourier", "alternet_hf.utils"}})
