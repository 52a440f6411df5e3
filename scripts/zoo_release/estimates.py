"""How long things take: the durations people write (`--cifar100c-budget 30m`), and the training time of the paper's
recipe on one H100 (FLOPs counted, at an assumed share of its peak)."""

from zoo_benchmark.flops import ASSUMED_UTILISATION, H100_BF16_FLOPS, training_flops_per_image

CIFAR_TRAIN_IMAGES, CIFAR_TEST_IMAGES = 50_000, 10_000


def parse_duration(text: str) -> float:
    """Seconds of `90`, `90s`, `30m`, `1.5h` or `2d`."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    text = str(text).strip().lower()
    unit = units.get(text[-1:], None)
    try:
        value = float(text[:-1] if unit else text) * (unit or 1)
    except ValueError:
        value = float("nan")
    if not value >= 0:
        raise ValueError(f"{text!r} is not a duration: write it as 90s, 30m, 1.5h or 2d")
    return value


def h100_estimate(presets, epochs: int | None = None, **overrides) -> tuple[float, str]:
    """Hours the real release's training takes on one H100 by measured FLOPs at an assumed sustained rate, and
    the lines that say how."""
    from alternet_hf.training.recipe import PAPER_RECIPE

    epochs = epochs or PAPER_RECIPE["epochs"]
    rate = H100_BF16_FLOPS * ASSUMED_UTILISATION
    lines, total = [], 0.0
    for preset in presets:
        flops = training_flops_per_image(preset, **overrides)
        # training images every epoch, plus the test split forward-only (a third of a training image) when evaluated
        per_run = flops * epochs * (CIFAR_TRAIN_IMAGES + CIFAR_TEST_IMAGES / 3 / PAPER_RECIPE["eval_every_epochs"])
        hours = per_run / rate / 3600
        total += hours
        lines.append(f"  {preset}: {flops / 1e9:.2f} GFLOPs per training image x {epochs} epochs -> {hours:.1f} h")
    lines.append(
        f"  total {total:.1f} h of training on one H100: an ESTIMATE from FLOPs counted here at an assumed "
        f"{ASSUMED_UTILISATION:.0%} of the {H100_BF16_FLOPS / 1e12:.0f} TFLOP/s bf16 peak (what a GPU sustained: "
        "docs/benchmarks.md); evaluation, CIFAR-100-C and the analyses add to it"
    )
    return total, "\n".join(lines)
