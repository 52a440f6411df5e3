"""Configuration of the post-activation ResNet used as the paper's CNN baseline.

This file imports only `configuration_common` of the package: both are copied next to the weights for
`trust_remote_code=True`.
"""

from transformers import PretrainedConfig

from .configuration_common import check_cnn_config

# The largest value of each field (of every stage, for a per-stage field): as configuration_alternet.py's.
FIELD_LIMITS = dict(num_channels=1024, image_size=8192, embedding_size=8192, depths=256, hidden_sizes=8192)


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
        check_cnn_config(self, FIELD_LIMITS, per_stage=("hidden_sizes",))
