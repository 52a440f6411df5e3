"""The benchmark results as text: the Markdown tables `scripts/benchmark.py` prints (and the README quotes)."""

from alternet_hf.utils import machine


def _table(header: str, rows, title: str | None = None) -> str:
    """A Markdown table: `title` if given, then `header` and each of `rows` ("a | b | c"), with the separator."""
    lines = [title] if title else []
    lines += [f"| {header} |", "|---" * (header.count("|") + 1) + "|", *(f"| {row} |" for row in rows)]
    return "\n".join(lines)


def throughput_table(results) -> str:
    return _table(
        "model | device | dtype | compile | batch | mode | images/s",
        (
            f"{r.model} | {r.device} | {r.dtype} | {'yes' if r.compiled else 'no'} | {r.batch_size} | {r.mode} | "
            f"{r.images_per_second:,.0f}"
            for r in results
        ),
    )


def evaluation_table(rows: list[dict]) -> str:
    """The release's CIFAR-100-C pass: images/s, per core, over eager in the same precision (timed in turn), and the
    hours of all of it at that speed."""
    threads = rows[0]["threads"]
    return _table(
        "model | compile | precision | batch | images/s | images/s per core | over eager | all of CIFAR-100-C (h)",
        (
            f"{r['model']} | {'yes' if r['compiled'] else 'no'} | {r['precision']} | {r['batch_size']} | "
            f"{r['images_per_second']:,.1f} | {r['images_per_second_per_core'] or float('nan'):,.1f} | "
            f"{'—' if r['over_eager'] is None else format(r['over_eager'], '.2f') + '×'} | {r['cifar100c_hours']:.1f}"
            for r in rows
        ),
        f"{machine()}" + (f", {threads} threads" if threads else "") + "; eval, no grad; variants timed in turn, "
        "median batch",
    )


def reference_race_table(rows: list[dict]) -> str:
    """The fair race: per memory format (both models given it) and pass, seconds by wall clock and CPU time."""
    return _table(
        "memory format | pass | batch | wall s: reference | wall s: alternet_hf | wall ratio | CPU s: reference "
        "| CPU s: alternet_hf | CPU ratio",
        (
            f"{r['memory_format']} | {r['pass_']} | {r['batch_size']} | {r['wall_seconds_reference']:.3f} | "
            f"{r['wall_seconds_alternet_hf']:.3f} | {r['wall_ratio']:.2f}× | {r['cpu_seconds_reference']:.3f} | "
            f"{r['cpu_seconds_alternet_hf']:.3f} | {r['cpu_ratio']:.2f}×"
            for r in rows
        ),
        f"{machine()}, {rows[0]['threads']} threads; AlterNet-50 (CIFAR-100), the zoo's against the reference code's",
    )


def data_path_line(result) -> str:
    per_pass = ", ".join(f"{ms:.3f}" for ms in result.milliseconds_per_image)
    return (
        f"{result.model}, {result.recipe} recipe, {'streamed' if result.streaming else 'prepared'} split, "
        f"{machine()}: {per_pass} ms CPU per image "
        f"({result.images_per_second_per_worker:,.0f} images/s per loader worker)"
    )


def training_run_lines(result) -> str:
    shares = ", ".join(f"{part} {100 * share:.0f}%" for part, share in result.shares.items())
    return (
        f"{result.model} on {result.device} ({machine()}), batch {result.batch_size}, {result.num_workers} workers, "
        f"compiled: {result.compiled}\n"
        f"{result.train_images} images in {result.seconds:.1f} s: {result.images_per_second:,.1f} images/s "
        f"(last epoch's training {result.last_epoch_images_per_second:,.1f} images/s); time: {shares}\n"
        f"checkpoint {result.checkpoint_bytes / 1e6:,.0f} MB; the full recipe's cadence writes "
        f"{result.recipe_checkpoints} in {result.recipe_minutes:g} minutes: "
        f"{result.recipe_checkpoint_bytes / 1e9:,.1f} GB"
    )


def finetune_table(rows: list[dict]) -> str:
    """Held-out accuracy of `alternet-finetune` with its defaults, per model and seed, and the median."""
    import statistics

    first, lines = rows[0], []
    for model in dict.fromkeys(r["model"] for r in rows):
        runs = [r for r in rows if r["model"] == model]
        accuracies = [100 * r["accuracy"] for r in runs]
        lines.append(
            f"{model} | {runs[0]['weights']} | {runs[0]['epochs']:g} | {runs[0]['learning_rate']:g} | "
            f"{', '.join(f'{a:.1f}' for a in accuracies)} | {statistics.median(accuracies):.1f} | "
            f"{statistics.mean(r['seconds'] for r in runs) / 60:.1f}"
        )
    return _table(
        "model | weights | epochs | learning rate | accuracy per seed (%) | median (%) | minutes per run",
        lines,
        f"{machine()}; {first['dataset']} ({first['images']['train']} to train, {first['images']['test']} to test)",
    )


def any_model_table(rows: list[dict]) -> str:
    return _table(
        "model | parameters | workers' server started | a worker's round trip | first answer | cached answer, "
        "figures drawn",
        [
            f"{r['architecture']} | {r['parameters'] / 1e6:.1f} M | {r['fork_server_seconds']:.1f} s | "
            f"{r['worker_seconds']:.2f} s | {r['analysed_seconds']:.1f} s | {r['cached_seconds']:.2f} s"
            for r in rows
        ],
        title=f"The Space's Any model tab, weights already local ({rows[0]['machine']})",
    )


def _hessian_cell(side: dict | None) -> str:
    """One tool's value(s) | products | seconds, or why there are none."""
    if side is None:
        return "not run | – | –"
    if "failed" in side:
        return f"fails: {side['failed'][:60]} | {side['hvps']} | {side['seconds']:.1f}"
    values = ", ".join(f"{v:.5g}" for v in side["values"])
    if side.get("projected"):
        return f"{values}, projected from its samples | ≈{side['hvps']:,} | ≈{side['seconds']:,.0f}"
    if "half_width" in side:
        values += f" ± {side['half_width']:.2g}" + ("" if side.get("converged", True) else " (not converged)")
    return f"{values} | {side['hvps']} | {side['seconds']:.1f}"


def hessian_peer_table(found: dict) -> str:
    rows = []
    for row in found["rows"]:
        peer, ours = row["peer"], row["ours"]
        ratio = f"{ours['seconds'] / peer['seconds']:.2f}×" if peer and "failed" not in peer else "–"
        rows.append(f"{row['quantity']} | {_hessian_cell(peer)} | {_hessian_cell(ours)} | {ratio}")
    return _table(
        "quantity | PyHessian: value | products | s | ours: value | products | s | our time / theirs",
        rows,
        title=(
            f"{found['model']} ({found['parameters']:,} parameters), {found['batch_size']} {found['dataset']} "
            f"images, BatchNorm eval, {found['threads']} thread(s), {found['peer'] or 'no peer'}; {found['machine']}"
        ),
    )


def atlas_table(found: dict) -> str:
    """Per model its row's seconds and the wall time to its row; then models per hour and what a refresh costs."""
    table = _table(
        "model | library | kind | parameters | status | row's seconds (check, fetch, probe) | wall seconds to its row",
        [
            f"{r['model_id']} | {r['library'] or '–'} | {r['kind'] or '–'} | "
            f"{'–' if r['parameters'] is None else format(r['parameters'] / 1e6, '.1f') + ' M'} | "
            f"{r['status']}{': ' + r['reason'] if r['reason'] else ''} | {r['seconds']:.1f} | {r['wall_seconds']:.1f}"
            for r in found["models"]
        ],
        title=f"alternet-atlas, weights already local ({found['machine']})",
    )
    models = len(found["models"])
    return "\n".join(
        [
            table,
            "",
            f"{models} models ({found['measured']} measured) in {found['measure_seconds']:.1f} s: "
            f"**{found['models_per_hour']:,.0f} models per hour**; then the card, claims and figures "
            f"{found['outputs_seconds']:.1f} s",
            f"the same again on the folder: {found['unchanged']} unchanged in "
            f"{found['refresh_measure_seconds']:.3f} s, "
            f"the card, claims and figures {found['refresh_outputs_seconds']:.1f} s; the installed command's refresh "
            f"(`alternet-atlas --output-dir`, start-up included) {found['refresh_command_seconds']:.1f} s "
            f"({found['refresh_command_said']})",
            "load average (1, 5, 15 min): before "
            + ", ".join(f"{load:.2f}" for load in found["load_average_before"])
            + "; after "
            + ", ".join(f"{load:.2f}" for load in found["load_average_after"]),
        ]
    )
