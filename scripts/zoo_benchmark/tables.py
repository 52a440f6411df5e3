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
    """The release's CIFAR-100-C pass: images/s, per core, and the hours of all of it at that speed."""
    threads = rows[0]["threads"]
    return _table(
        "model | compile | precision | batch | images/s | images/s per core | all of CIFAR-100-C (h)",
        (
            f"{r['model']} | {'yes' if r['compiled'] else 'no'} | {r['precision']} | {r['batch_size']} | "
            f"{r['images_per_second']:,.1f} | {r['images_per_second_per_core'] or float('nan'):,.1f} | "
            f"{r['cifar100c_hours']:.1f}"
            for r in rows
        ),
        f"{machine()}" + (f", {threads} threads" if threads else "") + "; eval, no grad",
    )


def engine_overhead_table(result: dict, repeats: int) -> str:
    table = _table(
        "loop | ms per step",
        (f"{label} | {value:.2f}" for label, value in result["median_milliseconds_per_step"].items()),
        f"{machine()}; CPU ms per step (median of {repeats}), batch {result['batch_size']}, the smallest AlterNet, "
        "one thread",
    )
    return f"{table}\nengine overhead: {result['overhead_milliseconds_per_step']:+.3f} ms per step"


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


def feature_maps_table(rows: list[dict]) -> str:
    return _table(
        "model | images | separate passes s | one pass s | reference notebooks s | separate / one | one / ref",
        (
            f"{r['model']} | {r['images']} | {r['separate_passes_s']:.2f} | {r['one_pass_s']:.2f} | "
            f"{r['reference_notebook_s']:.2f} | {r['separate_over_one_pass']:.2f}× | "
            f"{r['one_pass_over_reference']:.2f}×"
            for r in rows
        ),
    )


def corruptions_table(rows: list[dict]) -> str:
    first = rows[0]
    notes = list(dict.fromkeys(r["note"] for r in rows if not r["numpy_images_per_s"]))  # numbered in order of need
    table = _table(
        "corruption | ours images/s | imagecorruptions images/s | speed-up",
        (
            f"{r['corruption']} | {r['ours_images_per_s']:,.0f} | "
            + (f"{r['numpy_images_per_s']:,.0f}" if r["numpy_images_per_s"] else f"— ({notes.index(r['note']) + 1})")
            + (f" | {r['speedup']:.1f}×" if r["speedup"] else " | —")
            for r in rows
        ),
        f"{first['images']} images {first['image_size']}×{first['image_size']}, severity {first['severity']}, on "
        f"{first['device']}",
    )
    return "\n".join([table, *(f"({number}) {note}" for number, note in enumerate(notes, 1))])


def hessian_table(rows: list[dict]) -> str:
    return _table(
        "model | batch | top eigenvalue | HVPs to 1%: Lanczos | power | own stop: Lanczos (error) | power (error)",
        (
            f"{r['model']} | {r['batch_size']} | {r['top_eigenvalue']:.4g} | {r['lanczos_hvps_to_tolerance']} | "
            f"{r['power_hvps_to_tolerance'] or 'never'} | {r['lanczos_hvps_own_stop']} "
            f"({r['lanczos_error_own_stop']:.1e}) | {r['power_hvps_own_stop']} ({r['power_error_own_stop']:.1e})"
            for r in rows
        ),
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


def image_check_table(rows: list[dict]) -> str:
    """The check of a folder's image files before a run: files per second."""
    return _table(
        "files | mean file | seconds | files per second",
        (
            f"{r['num_images']:,} | {r['mean_file_bytes'] / 1024:.0f} KiB | {r['seconds']:.2f} | "
            f"{r['num_images'] / r['seconds']:,.0f}"
            for r in rows
        ),
        f"{machine()}; JPEGs in a folder of classes, read from the page cache",
    )


def sample_table(rows: list[dict]) -> str:
    """A streamed sample of a split against preparing the split first: seconds and bytes written to the cache."""
    return _table(
        "split images | files | sample | streamed (s) | cache written | prepared, then sampled (s) | cache written",
        (
            f"{r['split_images']:,} | {r['files']} | {r['num_images']:,} | {r['sample_seconds']:.1f} | "
            f"{r['sample_cache_bytes'] / 1e6:.1f} MB | {r['prepare_seconds']:.1f} | "
            f"{r['prepare_cache_bytes'] / 1e6:.1f} MB"
            for r in rows
        ),
        f"{machine()}; a split of CIFAR-shaped PNGs in parquet files, in the Hub's layout",
    )


def any_model_table(rows: list[dict]) -> str:
    return _table(
        "model | parameters | first answer | cached answer, figures drawn",
        [
            f"{r['architecture']} | {r['parameters'] / 1e6:.1f} M | {r['analysed_seconds']:.1f} s | "
            f"{r['cached_seconds']:.2f} s"
            for r in rows
        ],
        title=f"The Space's Any model tab, weights already local ({rows[0]['machine']})",
    )
