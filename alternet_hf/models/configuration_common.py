"""The field checks the zoo's configurations share (AlterNet's, the CIFAR ResNet's, and the presets' ViT).

Free of package imports and of torch: it travels with the configuration files for `trust_remote_code=True`.
"""

BLOCK_TYPES = ("basic", "bottleneck")
STEM_TYPES = ("cifar", "imagenet")
MAX_STAGES = 8


def check_sizes(config, limits: dict[str, int]) -> None:
    """Raise `ValueError` naming the first field of `limits` (or entry of a per-stage list) that is not an integer in
    [1, limit]: a typo fails at once, not as a division by zero or minutes of building."""
    for name, limit in limits.items():
        value = getattr(config, name)
        entries = {f"{name}[{i}]": v for i, v in enumerate(value)} if isinstance(value, list) else {name: value}
        for field, entry in entries.items():
            if not isinstance(entry, int) or isinstance(entry, bool) or not 0 < entry <= limit:
                raise ValueError(f"{type(config).__name__}.{field} must be an integer in [1, {limit}], got {entry!r}")


def check_rates(config, *names: str) -> None:
    """Raise `ValueError` naming the first of the rates `names` (dropout, drop-path) outside [0, 1)."""
    for name in names:
        value = getattr(config, name)
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{type(config).__name__}.{name} must be in [0, 1), got {value!r}")


def check_cnn_config(config, limits: dict[str, int], per_stage: tuple[str, ...]) -> None:
    """The checks of AlterNet's and the CIFAR ResNet's configs: known stem and block types, 1 to `MAX_STAGES` stages
    with one value of each `per_stage` field per stage, sizes within `limits`, stage widths divisible by the block's
    expansion, a drop-path rate in [0, 1)."""
    name = type(config).__name__
    for field, allowed in (("stem_type", STEM_TYPES), ("block_type", BLOCK_TYPES)):
        if getattr(config, field) not in allowed:
            raise ValueError(f"{name}.{field} must be one of {allowed}, got {getattr(config, field)!r}")
    num_stages = len(config.depths)
    if not 0 < num_stages <= MAX_STAGES:
        raise ValueError(f"{name}.depths must name 1 to {MAX_STAGES} stages, got {num_stages}")
    for field in per_stage:
        if len(getattr(config, field)) != num_stages:
            raise ValueError(
                f"{name}.{field} has {len(getattr(config, field))} entries but depths has {num_stages}: "
                "give one value per stage"
            )
    check_sizes(config, limits)
    for i, size in enumerate(config.hidden_sizes):
        if size % config.expansion:
            raise ValueError(
                f"{name}.hidden_sizes[{i}]={size} is not divisible by the {config.block_type} expansion "
                f"{config.expansion}"
            )
    check_rates(config, "drop_path_rate")
