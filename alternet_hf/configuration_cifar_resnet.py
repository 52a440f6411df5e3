"""Configuration of the post-activation ResNet used as the paper's CNN baseline.

This file must stay self-contained: it is copied next to the weights for `trust_remote_code=True`.
"""

from transformers import PretrainedConfig

BLOCK_TYPES = ("basic", "bottleneck")
STEM_TYPES = ("cifar", "imagenet")
# The largest value of each field (of every stage, for a per-stage field): as configuration_alternet.py's.
FIELD_LIMITS = dict(num_channels=1024, image_size=8192, embedding_size=8192, depths=256, hidden_sizes=8192)
MAX_STAGES = 8


class CifarResNetConfig(PretrainedConfig):
    r"""Configuration of a [`CifarResNetModel`]; the defaults give the reference's CIFAR ResNet-50.

    Args:
        num_channels: channels of the input images.
        image_size: side of the images the model is trained on.
        embedding_size: output channels of the stem convolution.
        stem_type: `"cifar"` (3×3/1 conv, BN, ReLU) or `"imagenet"` (7×7/2 conv, BN, ReLU, 3×3/2 max-pool).
        block_type: `"basic"` (expansion 1) or `"bottleneck"` (expansion 4).
        depths: number of blocks per stage.
        hidden_sizes: output channels of each stage.
        drop_path_rate: stochastic-depth rate of the last block, rising linearly from 0 (0 in the reference).
    """

    model_type = "cifar_resnet"

    def __init__(
        self,
        num_channels: int = 3,
        image_size: int = 32,
        embedding_size: int = 64,
        stem_type: str = "cifar",
        block_type: str = "bottleneck",
        depths: tuple[int, ...] = (3, 4, 6, 3),
        hidden_sizes: tuple[int, ...] = (256, 512, 1024, 2048),
        drop_path_rate: float = 0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_channels = num_channels
        self.image_size = image_size
        self.embedding_size = embedding_size
        self.stem_type = stem_type
        self.block_type = block_type
        self.depths = list(depths)
        self.hidden_sizes = list(hidden_sizes)
        self.drop_path_rate = drop_path_rate
        self.validate_fields()

    @property
    def expansion(self) -> int:
        """Ratio of a block's output channels to its inner width."""
        return 4 if self.block_type == "bottleneck" else 1

    def validate_fields(self) -> None:
        """Raise `ValueError` naming the first field that cannot describe this ResNet."""

        def positive_int(name, value, limit):
            if not isinstance(value, int) or isinstance(value, bool) or not 0 < value <= limit:
                raise ValueError(f"CifarResNetConfig.{name} must be an integer in [1, {limit}], got {value!r}")

        for name in ("num_channels", "image_size", "embedding_size"):
            positive_int(name, getattr(self, name), FIELD_LIMITS[name])
        if self.stem_type not in STEM_TYPES:
            raise ValueError(f"CifarResNetConfig.stem_type must be one of {STEM_TYPES}, got {self.stem_type!r}")
        if self.block_type not in BLOCK_TYPES:
            raise ValueError(f"CifarResNetConfig.block_type must be one of {BLOCK_TYPES}, got {self.block_type!r}")
        if not 0 < len(self.depths) <= MAX_STAGES:
            raise ValueError(f"CifarResNetConfig.depths must name 1 to {MAX_STAGES} stages, got {len(self.depths)}")
        if len(self.hidden_sizes) != len(self.depths):
            raise ValueError(
                f"CifarResNetConfig.hidden_sizes has {len(self.hidden_sizes)} entries but depths has "
                f"{len(self.depths)}: give one value per stage"
            )
        for i, (depth, size) in enumerate(zip(self.depths, self.hidden_sizes)):
            positive_int(f"depths[{i}]", depth, FIELD_LIMITS["depths"])
            positive_int(f"hidden_sizes[{i}]", size, FIELD_LIMITS["hidden_sizes"])
            if size % self.expansion:
                raise ValueError(
                    f"CifarResNetConfig.hidden_sizes[{i}]={size} is not divisible by the "
                    f"{self.block_type} expansion {self.expansion}"
                )
        if not 0.0 <= self.drop_path_rate < 1.0:
            raise ValueError(f"CifarResNetConfig.drop_path_rate must be in [0, 1), got {self.drop_path_rate!r}")
