"""One prepared check of a GPU machine, for a rented, metered one: the training engine, the evaluation and the
analyses measured in parts, each bounded in time; a short table last, and the results as JSON after every part (a
part that fails or runs out of time leaves the others' numbers).

    python scripts/device_check.py --prepare-wheels .whl  # beforehand, with a package index: what the GPU lacks
    python scripts/device_check.py --wheels .whl          # on the GPU machine, from a copy of the repo, no install
    python scripts/device_check.py --cpu-rehearsal        # every part at tiny sizes, on this CPU
    python scripts/device_check.py --wheels .whl --parts engine-alternet-50 --compile-mode default
    python scripts/device_check.py --wheels .whl --reference-dir how-do-vits-work  # with the reference beside ours

Parts, in order (`--parts` picks some), after the engine parts' training data is written (outside their budgets):
  machine       versions, the bf16 matrix rate; bf16 against fp32 on one batch per model
  engine-*      the paper recipe's training steps of AlterNet-50, ResNet-50 and ViT-Ti through the engine's own loop
                and loader workers, bf16 and fp32, compiled and eager (docs/benchmarks.md lists what is measured)
  reference     the reference code's own AlterNet-50 (a copy given by --reference-dir) in the engine's loop, and ours
                beside it, in turn: the same data, batch and optimizer, eager, in fp32 and in bf16 autocast
  evaluation    the release's CIFAR-100-C pass, compiled
  analyses      Hessian-vector products, one feature-map pass for Fourier and variance, CIFAR-C generation
"""

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODELS = ("alternet-50-cifar100", "resnet-50-cifar100", "vit-ti-cifar100")
# What a GPU machine lacks, at the versions installed here: `datasets`, which the engine's data path reads, what it
# needs, and a pyarrow as new as it needs. Installed there only where the machine's own is missing or older.
WHEELS = ("datasets", "dill", "multiprocess", "pyarrow")
WHEEL_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
# The engine's runs of one model, most important first: the engine's own setting on CUDA (bf16, compiled) leads.
ENGINE_VARIANTS = (("bf16", True), ("bf16", False), ("fp32", False), ("fp32", True))
# The reference part's runs, each of the reference's model and then ours: as a user of the reference code runs it.
REFERENCE_VARIANTS = (("fp32", False), ("bf16", False))
# The engine's compile modes (a test keeps them equal to alternet_hf.training.recipe's).
COMPILE_MODES = ("auto", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass(frozen=True)
class Sizes:
    """How much each part measures: on the GPU machine, or in the CPU rehearsal (tiny models, few steps)."""

    image_size: int = 32
    model_overrides: dict = field(default_factory=dict)  # per preset
    matmul_size: int = 8192
    precision_batch: int = 96
    train_images: int = 24_576
    num_workers: int | None = None  # None: the recipe's
    batch_size: int | None = None  # None: the recipe's
    warmup_steps: int = 10
    timed_seconds: float = 5.0
    min_steps: int = 20
    compile_seconds: float = 60.0  # left at least, beyond the timed seconds, for a compiled variant to start
    build_seconds: float = 5.0  # the same for an eager one (model, optimizer, loader workers, warm-up)
    eval_batch_sizes: tuple = (256, 1024)
    eval_repeats: int = 20
    analysis_model: str = "alternet-50-cifar100"
    hessian_batch: int = 96
    hessian_steps: int = 60
    feature_map_images: int = 256
    corruption_images: int = 10_000
    # The reference part's AlterNet, in the zoo config's terms (the reference's widths are fixed), on 32×32 images
    # (its attention windows need them); {}: AlterNet-50.
    reference_overrides: dict = field(default_factory=dict)

    def overrides(self, name: str) -> dict:
        return self.model_overrides.get(name, {})


TINY_CNN = dict(embedding_size=8, depths=[1, 2], hidden_sizes=[16, 32], image_size=16)
TINY = {
    "alternet-50-cifar100": dict(
        TINY_CNN, num_attention_blocks=[0, 1], num_attention_heads=[1, 2], attention_head_dim=8
    ),
    "resnet-50-cifar100": TINY_CNN,
    "vit-ti-cifar100": dict(
        hidden_size=24, num_hidden_layers=2, num_attention_heads=2, intermediate_size=48, image_size=16, patch_size=4
    ),
}
REHEARSAL = Sizes(
    image_size=16,
    model_overrides=TINY,
    matmul_size=256,
    precision_batch=8,
    train_images=96,
    num_workers=2,
    batch_size=8,
    warmup_steps=2,
    timed_seconds=0.5,
    min_steps=2,
    compile_seconds=0.0,
    build_seconds=0.0,
    eval_batch_sizes=(16,),
    eval_repeats=2,
    hessian_batch=8,
    hessian_steps=4,
    feature_map_images=16,
    corruption_images=16,
    reference_overrides=dict(depths=[1, 1, 1, 2], num_attention_blocks=[0, 0, 0, 1], num_attention_heads=[1, 1, 1, 1]),
)


# Each part, with its weight in the check's --budget: seconds of the GPU check.
PARTS = {
    "machine": 40,
    **{f"engine-{name.rsplit('-', 1)[0]}": 95 for name in MODELS},
    "reference": 60,
    "evaluation": 45,
    "analyses": 50,
}
DATA_STEP, DATA_SECONDS = "data", 120.0  # the engine parts' data, written before them, outside their budgets
GPU_BUDGET, REHEARSAL_BUDGET = 480.0, 1800.0
REFERENCE_CODE = "https://github.com/xxxnell/how-do-vits-work"  # the reference part's model comes from a clone
REFERENCE_IMAGE_SIZE = 32
MIN_PART_SECONDS = 5.0  # a part whose share of the budget is smaller is skipped


class Recorder:
    """Rows of a part, appended to a JSON-lines file as each is measured (a killed part keeps its finished rows)."""

    def __init__(self, path: Path, deadline: float):
        self.path, self.deadline = path, deadline

    def left(self) -> float:
        return self.deadline - time.time()

    def measure(self, what: dict, function, *, needs: float = 0.0) -> dict:
        """Run `function() -> dict` and record its row under `what`; record an error or 'out of time' instead."""
        if self.left() < needs:
            row = {**what, "skipped": f"out of time ({self.left():.0f} s left of the part, {needs:.0f} s needed)"}
        else:
            started = time.time()
            try:
                row = {**what, **function()}
            except Exception as error:  # one row failing must not cost the others
                import traceback

                traceback.print_exc()
                row = {**what, "error": f"{type(error).__name__}: {error}"}
            row["part_seconds"] = time.time() - started
        print(json.dumps(row), flush=True)
        with self.path.open("a") as rows:
            rows.write(json.dumps(row) + "\n")
        return row


def run_machine(sizes: Sizes, record: Recorder) -> None:
    import torch

    from zoo_benchmark.device import environment, matmul_rate, precision_gap

    record.measure({"what": "environment"}, environment)
    for dtype in (torch.bfloat16, torch.float32):
        name = str(dtype).removeprefix("torch.")
        record.measure(
            {"what": "matmul", "dtype": name, "size": sizes.matmul_size},
            lambda dtype=dtype: {"tflops_per_second": matmul_rate(sizes.matmul_size, dtype) / 1e12},
        )
    for model in MODELS:
        record.measure(
            {"what": "precision", "model": model},
            lambda model=model: precision_gap(model, batch_size=sizes.precision_batch, **sizes.overrides(model)),
        )


def write_engine_data(sizes: Sizes, record: Recorder, workdir: Path, image_size: int | None = None) -> str | None:
    """The engine parts' CIFAR-schema dataset (PNG images, 100 classes, `image_size` or the sizes' own), written once
    for all of them; its path, or None where it could not be written."""
    size = image_size or sizes.image_size
    folder = workdir / f"data-{size}"

    def write() -> dict:
        from zoo_benchmark.engine import cifar_like_dataset

        if not (folder / "written").exists():
            images = sizes.train_images
            cifar_like_dataset(str(folder), num_labels=100, image_size=size, train=images, test=1)
            (folder / "written").touch()
        return {"path": str(folder)}

    return record.measure({"what": "data", "images": sizes.train_images}, write).get("path")


def measure_engine(record: Recorder, variant: dict, sizes: Sizes, data: str | None, workdir: Path, **options) -> None:
    """One run of the engine's steady state for `variant` (its model, precision and compilation) at the sizes' batch,
    loader workers and timing, recorded under `variant`; `options`: the rest of `engine_steady_state`'s."""
    from zoo_benchmark.device import engine_steady_state

    if data is None:
        record.measure(variant, lambda: {"skipped": "no training data (see the data row)"})
        return
    compiled = variant["compiled"]
    record.measure(
        variant,
        lambda: engine_steady_state(
            variant["model"],
            dataset=data,
            workdir=str(workdir),
            compiled=compiled,
            bf16=variant["precision"] == "bf16",
            batch_size=sizes.batch_size,
            num_workers=sizes.num_workers,
            warmup_steps=sizes.warmup_steps,
            seconds=sizes.timed_seconds,
            min_steps=sizes.min_steps,
            **options,
        ),
        needs=sizes.timed_seconds + (sizes.compile_seconds if compiled else sizes.build_seconds),
    )


def run_engine(model: str, sizes: Sizes, record: Recorder, workdir: Path, compile_mode: str) -> None:
    data = write_engine_data(sizes, record, workdir)
    for precision, compiled in ENGINE_VARIANTS:
        variant = {"what": "engine", "model": model, "precision": precision, "compiled": compiled}
        run = dict(compile_mode=compile_mode, model_overrides=sizes.overrides(model))
        measure_engine(record, variant, sizes, data, workdir / f"run-{precision}-{compiled}", **run)


def run_reference(sizes: Sizes, record: Recorder, workdir: Path, reference_dir: str | None) -> None:
    model = "alternet-50-cifar100"
    if reference_dir is None:
        advice = f"no copy of the reference code: git clone {REFERENCE_CODE}, bring it along, give --reference-dir"
        record.measure({"what": "reference", "model": model}, lambda: {"skipped": advice})
        return
    data = write_engine_data(sizes, record, workdir, image_size=REFERENCE_IMAGE_SIZE)
    for precision, compiled in REFERENCE_VARIANTS:
        for code in ("reference", "alternet_hf"):
            variant = {"what": "reference", "model": model, "code": code, "precision": precision, "compiled": compiled}
            peer = reference_dir if code == "reference" else None
            run = dict(model_overrides=sizes.reference_overrides, reference_dir=peer)
            measure_engine(record, variant, sizes, data, workdir / f"reference-{code}-{precision}", **run)


def run_evaluation(sizes: Sizes, record: Recorder) -> None:
    from zoo_benchmark.models import evaluation_throughput

    for batch_size in sizes.eval_batch_sizes:
        for model in MODELS:
            record.measure(
                {"what": "evaluation", "model": model, "batch_size": batch_size},
                lambda model=model, batch_size=batch_size: evaluation_throughput(
                    model,
                    batch_size=batch_size,
                    variants=[(True, False)],
                    repeats=sizes.eval_repeats,
                    **sizes.overrides(model),
                )[0],
                needs=sizes.compile_seconds / 4,
            )


def run_analyses(sizes: Sizes, record: Recorder) -> None:
    from alternet_hf.data.cifar_c import CORRUPTIONS
    from analysis.inputs import choose_device
    from zoo_benchmark.analyses import corruption_speed, hessian_convergence, per_block_speed

    device = choose_device().type
    model, overrides = sizes.analysis_model, sizes.overrides(sizes.analysis_model)

    def hessian():
        found = hessian_convergence(
            model, batch_size=sizes.hessian_batch, max_steps=sizes.hessian_steps, device=device, **overrides
        )
        return {**found, "hvps_per_second": 1 / found["seconds_per_hvp"]}

    record.measure({"what": "hessian", "model": model}, hessian)
    record.measure(
        {"what": "feature maps", "model": model},
        lambda: per_block_speed(model, num_images=sizes.feature_map_images, device=device, **overrides),
    )
    for name in CORRUPTIONS:
        record.measure(
            {"what": "corruption", "corruption": name},
            lambda name=name: corruption_speed(
                num_images=sizes.corruption_images, corruptions=[name], device=device, repeats=2
            )[0],
        )


def run_part(
    name: str, sizes: Sizes, record: Recorder, workdir: Path, compile_mode: str, reference_dir: str | None
) -> None:
    if name == "machine":
        run_machine(sizes, record)
    elif name == DATA_STEP:
        write_engine_data(sizes, record, workdir)
    elif name.startswith("engine-"):
        model = next(m for m in MODELS if m.startswith(name.removeprefix("engine-") + "-"))
        run_engine(model, sizes, record, workdir, compile_mode)
    elif name == "reference":
        run_reference(sizes, record, workdir, reference_dir)
    elif name == "evaluation":
        run_evaluation(sizes, record)
    else:
        run_analyses(sizes, record)


def install_wheels(folder: Path, target: Path) -> list[str]:
    """Install into `target` the wheels of `folder` whose package this Python lacks or has in an older version."""
    from packaging.version import Version

    chosen = []
    for wheel in sorted(folder.glob("*.whl")):
        name, version = wheel.name.split("-")[:2]
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed = None
        if installed is None or Version(installed) < Version(version):
            chosen.append(wheel)
    if chosen:
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
        subprocess.run([*pip, "--no-cache-dir", "--upgrade", "--target", str(target), *map(str, chosen)], check=True)
    return [wheel.name for wheel in chosen]


def prepare_wheels(folder: Path, python_version: str) -> None:
    """Download, for `python_version` on x86-64 Linux, the wheels of WHEELS at the versions installed here."""
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in WHEELS]
    platforms = [option for platform in WHEEL_PLATFORMS for option in ("--platform", platform)]
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--implementation", "cp"]
    command += ["--python-version", python_version, *platforms, "-d", str(folder), *pins]
    subprocess.run(command, check=True)
    print(f"wheels for Python {python_version} in {folder}: {', '.join(pins)}")


def run_check(args, sizes: Sizes, out: Path) -> dict:
    parts = {name: weight for name, weight in PARTS.items() if name in (args.parts or PARTS)}
    results = {"mode": "cpu rehearsal" if args.cpu_rehearsal else "gpu", "budget_seconds": args.budget, "parts": {}}
    environment = dict(os.environ, PYTHONUNBUFFERED="1")
    with tempfile.TemporaryDirectory(prefix="alternet-device-check-") as work:
        work = Path(work)
        path = [str(REPO)]
        if args.wheels:
            # Named site-packages: `datasets` pickles (with dill) what it fingerprints, and dill pickles a module found
            # anywhere else by value, which fails for pyarrow's.
            site = work / "site-packages"
            results["wheels_installed"] = install_wheels(args.wheels, site)
            path.append(str(site))
        environment["PYTHONPATH"] = os.pathsep.join(path + [environment.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        end = time.time() + args.budget
        if any(name.startswith("engine-") for name in parts):
            parts = {DATA_STEP: 0, **parts}
        weights = list(parts.values())
        for index, name in enumerate(parts):
            # its share of what is left: time a part did not use goes to the parts after it
            if name == DATA_STEP:
                budget = min(DATA_SECONDS, end - time.time())
            else:
                budget = (end - time.time()) * weights[index] / sum(weights[index:])
            rows_file = work / f"{name}.jsonl"
            print(f"\n== {name} ({budget:.0f} s at most)", flush=True)
            started = time.time()
            if budget < MIN_PART_SECONDS:
                status = "skipped: the check's --budget was spent"
            else:
                command = [sys.executable, __file__, "--part", name, "--rows", str(rows_file)]
                command += ["--deadline", str(started + budget), "--work", str(work)]
                command += ["--cpu-rehearsal"] * args.cpu_rehearsal + ["--compile-backend", args.compile_backend]
                command += ["--compile-mode", args.compile_mode]
                command += ["--reference-dir", str(args.reference_dir)] * (args.reference_dir is not None)
                try:
                    code = subprocess.run(command, env=environment, timeout=budget + 20).returncode
                    status = "ok" if code == 0 else f"failed (exit status {code}; the log above says why)"
                except subprocess.TimeoutExpired:
                    status = "killed at its time limit"
            rows = [json.loads(line) for line in rows_file.read_text().splitlines()] if rows_file.exists() else []
            results["parts"][name] = {"status": status, "seconds": time.time() - started, "rows": rows}
            write_results(results, out)
    return results


def write_results(results: dict, out: Path) -> None:
    from alternet_hf.utils import write_json

    write_json(out / "device_check.json", results)
    (out / "device_check.md").write_text(summary(results))


ENGINE_COLUMNS = tuple(
    "engine | precision | compiled | batch | images/s | ms/step | loader wait | syncs/step | graph breaks | recompiles "
    "| peak GiB | TFLOP/s | of bf16 peak (goal 8%)".split(" | ")
)


def _number(value, digits: int = 0) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def summary(results: dict) -> str:
    rows = [row for part in results["parts"].values() for row in part["rows"]]
    environment = next((row for row in rows if row["what"] == "environment" and "error" not in row), {})
    device = environment.get("device") or next((row["device"] for row in rows if row.get("device")), "no device read")
    lines = [f"# device check ({results['mode']}): {device}", ""]
    if environment:
        packages = ", ".join(f"{name} {version}" for name, version in environment["packages"].items() if version)
        lines += [f"Python {environment['python']}, {environment['cpu_count']} CPUs; {packages}", ""]
    lines += ["| part | status | seconds |", "|---|---|---|"]
    lines += [f"| {name} | {part['status']} | {part['seconds']:.0f} |" for name, part in results["parts"].items()]
    engine = [row for row in rows if row["what"] == "engine"]
    if engine:
        lines += ["", "| " + " | ".join(ENGINE_COLUMNS) + " |", "|---" * len(ENGINE_COLUMNS) + "|"]
    for row in engine:
        mode = row.get("compile_mode") or "default"
        compiled = ("yes" if mode == "default" else f"yes ({mode})") if row["compiled"] else "no"
        start = f"| {row['model']} | {row['precision']} | {compiled} |"
        if "images_per_second" not in row:
            lines.append(f"{start} {row.get('skipped') or row.get('error')} |" + " |" * (len(ENGINE_COLUMNS) - 4))
            continue
        share = row["share_of_bf16_peak"]
        lines.append(
            f"{start} {row['batch_size']} | {_number(row['images_per_second'])} | "
            f"{_number(row['milliseconds_per_step'], 1)} | {row['data_wait_share']:.0%} | "
            f"{_number(row['syncs_per_step'], 2)} | {row['graph_breaks']} | {_number(row['recompiles'])} | "
            f"{_number(row['peak_memory_gib'], 1)} | {_number(row['tflops_per_second'], 1)} | "
            f"{'—' if share is None else f'{share:.1%}'} |"
        )
    lines += _reference_lines(rows)
    lines += ["", "| measured | result |", "|---|---|"]
    lines += [f"| {label} | {text} |" for label, text in _other_results(rows)]
    return "\n".join(lines) + "\n"


def _reference_lines(rows: list[dict]) -> list[str]:
    """The reference part's table: per precision, the reference's AlterNet-50 and ours, eager in the engine's loop,
    and the time per image of the reference over ours; last, against ours as the engine runs it (bf16, compiled)."""
    found = {(row.get("code"), row.get("precision")): row for row in rows if row["what"] == "reference"}
    if not found:
        return []
    header = "| AlterNet-50, engine's loop | reference images/s | ours images/s | reference / ours |"
    lines = ["", header, "|---|---|---|---|"]
    if (None, None) in found:  # the part's one row: why nothing was measured
        return [*lines, f"| — | {found[None, None].get('skipped') or found[None, None].get('error')} | | |"]
    engine = [row for row in rows if row["what"] == "engine" and row["model"] == "alternet-50-cifar100"]
    ours_default = next((row for row in engine if row["precision"] == "bf16" and row["compiled"]), None)
    precisions = [precision for precision, _ in REFERENCE_VARIANTS]
    pairs = [(f"{precision}, eager", precision, found.get(("alternet_hf", precision))) for precision in precisions]
    if ours_default is not None:
        pairs.append(("ours bf16 compiled (engine part) against the reference's bf16 eager", "bf16", ours_default))
    for label, precision, ours in pairs:
        reference = found.get(("reference", precision))
        rates = [None if row is None else row.get("images_per_second") for row in (reference, ours)]
        ratio = f"{rates[1] / rates[0]:.2f}×" if None not in rates else "—"
        lines.append(f"| {label} | {_number(rates[0])} | {_number(rates[1])} | {ratio} |")
    return lines


def _other_results(rows: list[dict]):
    """(what, result) of every row but the engine's; the corruptions in one line."""
    formats = {  # what: (its label, its result)
        "matmul": ("{dtype} matrix product {size}³", "{tflops_per_second:.1f} TFLOP/s"),
        "precision": (
            "bf16 against fp32, {model}",
            "relative error of the logits {logits_relative_error:.1e}, of the gradient norm "
            "{gradient_norm_relative_error:.1e}; top-1 agrees on {top1_agreement:.0%}",
        ),
        "evaluation": (
            "CIFAR-100-C pass, {model}, batch {batch_size}, compiled",
            "{images_per_second:,.0f} images/s: all of CIFAR-100-C in {cifar100c_minutes:.1f} min",
        ),
        "hessian": (
            "Hessian-vector products, {model}",
            "{hvps_per_second:.1f} per second at batch {batch_size}; Lanczos within 1% after "
            "{lanczos_hvps_to_tolerance} products",
        ),
        "feature maps": ("Fourier + variance in one pass, {model}", "{one_pass_s:.2f} s for {images} images"),
    }
    for row in rows:
        if row["what"] in formats:
            if "cifar100c_hours" in row:
                row = {**row, "cifar100c_minutes": 60 * row["cifar100c_hours"]}
            label, result = formats[row["what"]]
            yield label.format(**row), row.get("skipped") or row.get("error") or result.format(**row)
    corruptions = [row for row in rows if row["what"] == "corruption"]
    rates = sorted((row["ours_images_per_s"], row["corruption"]) for row in corruptions if "ours_images_per_s" in row)
    if corruptions:
        text = f"{len(rates)} of {len(corruptions)} measured"
        if rates:
            text += f"; slowest {rates[0][1]} at {rates[0][0]:,.0f} images/s, median {rates[len(rates) // 2][0]:,.0f}"
        yield "CIFAR-C generation on the device, per corruption", text


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None, help="results folder (default: $OUT, else device-check/)")
    parser.add_argument("--parts", nargs="+", choices=PARTS, help="run only these parts (default: all)")
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        help=f"seconds for the whole check (default: {GPU_BUDGET:.0f}; {REHEARSAL_BUDGET:.0f} in the rehearsal); "
        "each part's share shrinks with it, and a part that reaches its share stops with what it measured",
    )
    parser.add_argument("--cpu-rehearsal", action="store_true", help="every part at tiny sizes, on the CPU")
    parser.add_argument("--wheels", type=Path, help="a folder of wheels to install where this Python lacks them")
    parser.add_argument(
        "--prepare-wheels",
        type=Path,
        metavar="FOLDER",
        help="download the wheels a GPU machine lacks (datasets and what it needs) into FOLDER, and stop",
    )
    parser.add_argument("--python-version", default="3.12", help="of the GPU machine, for --prepare-wheels")
    parser.add_argument(
        "--compile-backend",
        default="inductor",
        help="torch.compile's backend (aot_eager checks graphs without generating code, for quick rehearsals)",
    )
    parser.add_argument(
        "--compile-mode",
        default="auto",
        choices=COMPILE_MODES,
        help="torch.compile's mode of the engine's compiled step (default: the engine's, auto)",
    )
    parser.add_argument(
        "--reference-dir",
        type=Path,
        help=f"a copy of the reference code (git clone {REFERENCE_CODE}): its AlterNet-50 is timed beside ours in "
        "the reference part (without it the part says where to get it)",
    )
    for hidden in ("--part", "--rows", "--deadline", "--work"):  # how the check runs one part in its own process
        parser.add_argument(hidden, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    sizes = REHEARSAL if args.cpu_rehearsal else Sizes()
    sys.path.insert(0, str(REPO))  # a copy of the repository, not installed: its packages are imported from there
    if args.part:
        sys.path.insert(0, str(REPO / "scripts"))
        if args.cpu_rehearsal:
            os.environ["CUDA_VISIBLE_DEVICES"] = ""
        if args.compile_backend != "inductor":
            import functools

            import torch

            torch.compile = functools.partial(torch.compile, backend=args.compile_backend)
        recorder = Recorder(Path(args.rows), float(args.deadline))
        run_part(args.part, sizes, recorder, Path(args.work), args.compile_mode, args.reference_dir)
        return
    if args.prepare_wheels:
        prepare_wheels(args.prepare_wheels, args.python_version)
        return
    if args.wheels and not any(args.wheels.glob("*.whl")):
        parser.error(f"--wheels {args.wheels}: no wheels there; write them with --prepare-wheels {args.wheels}")
    if args.reference_dir and not (args.reference_dir / "models" / "alternet.py").is_file():
        parser.error(
            f"--reference-dir {args.reference_dir}: not a copy of the reference code (no models/alternet.py); "
            f"git clone {REFERENCE_CODE}"
        )
    if args.budget is not None and args.budget <= 0:
        parser.error("--budget takes a number of seconds above 0")
    args.budget = args.budget or (REHEARSAL_BUDGET if args.cpu_rehearsal else GPU_BUDGET)
    out = args.out or Path(os.environ.get("OUT") or "device-check")
    results = run_check(args, sizes, out)
    print("\n" + summary(results))
    print(f"wrote {out / 'device_check.json'} and {out / 'device_check.md'}")
    if any(part["status"] != "ok" for part in results["parts"].values()):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
