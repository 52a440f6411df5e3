"""The layout's rules, read from the source (CONTRIBUTING.md draws them): no import circle between modules, the
library never reaches up into the commands (`alternet_hf.cli`), and the models never import the analyses."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("alternet_hf", "analysis")
# The applications inside alternet_hf: they may use the analyses (the commands, the Space, the mini-zoo, what goes to
# the Hub: CIFAR-100-C too). The maintainer's tools (scripts/: the release, the benchmarks) are not installed and may
# use anything.
APPLICATIONS = ("alternet_hf.cli", "alternet_hf.space", "alternet_hf.minizoo", "alternet_hf.buildup", "alternet_hf.hub")
TRAINING = ("alternet_hf.training", "alternet_hf.finetuning")


def _modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            modules[name.removesuffix(".__init__")] = path
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


def test_no_module_imports_itself_through_others():
    # A package imports its own modules (its __init__ re-exports them); an edge into a package is an edge into its
    # __init__ only, which is not a circle through the module that imported it.
    edges = {name: {t for t in targets if not name.startswith(t + ".")} for name, targets in _graph().items()}
    circles = _circles(edges)
    assert not circles, "import circles:\n" + "\n".join(circles)


def test_the_library_never_imports_the_commands_and_the_models_never_the_analyses():
    wrong = []
    for name, targets in _graph().items():
        if name.startswith("alternet_hf.cli"):
            continue
        wrong += [f"{name} -> {t}" for t in targets if t.startswith("alternet_hf.cli")]
        if name.startswith("alternet_hf") and not name.startswith(APPLICATIONS):
            wrong += [f"{name} -> {t}" for t in targets if t.startswith("analysis")]
        if name.startswith("analysis"):  # measurements: they neither run the applications nor train
            wrong += [f"{name} -> {t}" for t in targets if t.startswith((*APPLICATIONS, *TRAINING))]
    assert not wrong, "\n".join(wrong)


def test_the_rules_see_the_imports():
    """The checks see function-level imports and would catch a circle (a rule that sees nothing proves nothing)."""
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a -> b -> c -> a"]
    graph = _graph()
    assert "alternet_hf.augmentation" in graph["alternet_hf.recipe"]  # recipe -> augmentation, found at function level
    assert "alternet_hf.training" in graph["alternet_hf.evaluation"]
    assert "analysis.runner" in graph["alternet_hf.cli.analyze"]
