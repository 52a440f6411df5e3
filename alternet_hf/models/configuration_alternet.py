"""AlterNet configuration: the model of "How Do Vision Transformers Work?" (Park & Kim, ICLR 2022).

This file imports only `configuration_common` of the package: both are copied next to the weights for
`trust_remote_code=True`.
"""

from transformers import PretrainedConfig

from .configuration_common import check_cnn_config

# The largest value of each field (of every stage, for a per-stage field): far beyond any published network (the
# deepest ResNet stage has 111 blocks, the widest 8192 channels), low enough that a typo fails at once.
FIELD_LIMITS = dict(
    num_channels=1024,
    image_size=8192,
    embedding_size=8192,
    attention_head_dim=1024,
    window_size=64,
    depths=256,
    hidden_sizes=8192,
    num_attention_heads=256,
)


class AlterNetConfig(PretrainedConfig):
    r"""Configuration of an [`AlterNetModel`].

    The defaults give AlterNet-50 for CIFAR in the paper's layout.

    Args:
        num_channels: channels of the input images.
        image_size: side of the images the model is trained on (for the image processor and input checks).
        embedding_size: output channels of the stem convolution.
        stem_type: `"cifar"` (one 3×3 stride-1 conv) or `"imagenet"` (7×7/2 conv, BN, ReLU, 3×3/2 max-pool).
        block_type: `"basic"` (two 3×3 convs, expansion 1) or `"bottleneck"` (1×1, 3×3, 1×1, expansion 4).
        depths: number of blocks per stage.
        hidden_sizes: output channels of each stage (bottleneck width × expansion).
        num_attention_blocks: MSA blocks per stage: the last `2 * m` blocks of a stage alternate conv, MSA.
            `(0, 1, 1, 2)` is the paper's AlterNet-50, `(0, 1, 3, 2)` the reference code's default.
        num_attention_heads: heads of the MSA blocks of each stage.
        attention_head_dim: width of one head.
        window_size: side of the non-overlapping attention windows (4 for CIFAR, 7 for ImageNet).
        drop_path_rate: stochastic-depth rate of the last block; block `j` of `n` gets `rate * j / (n - 1)`.
    """

    model_type = "alternet"

    def __init__(
        self,
        num_channels: int = 3,
        image_size: int = 32,
        embedding_size: int = 64,
        stem_type: str = "cifar",
        block_type: str = "bottleneck",
        depths: tuple[int, ...] = (3, 4, 6, 4),
        hidden_sizes: tuple[int, ...] = (256, 512, 1024, 2048),
        num_attention_blocks: tuple[int, ...] = (0, 1, 1, 2),
        num_attention_heads: tuple[int, ...] = (3, 6, 12, 24),
        attention_head_dim: int = 64,
        window_size: int = 4,
        drop_path_rate: float = 0.1,
        initializer_range: float = 0.02,
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
        self.num_attention_blocks = list(num_attention_blocks)
        self.num_attention_heads = list(num_attention_heads)
        self.attention_head_dim = attention_head_dim
        self.window_size = window_size
        self.drop_path_rate = drop_path_rate
        self.initializer_range = initializer_range
        self.validate_fields()

    @property
    def expansion(self) -> int:
        """Ratio of a block's output channels to its inner width."""
        return 4 if self.block_type == "bottleneck" else 1

    def stage_layouts(self) -> list[list[str]]:
        """The kind of every block, stage by stage: `"conv"` or `"msa"` (the whole layout rule)."""
        return [
            ["conv"] * (depth - 2 * m) + ["conv", "msa"] * m for depth, m in zip(self.depths, self.num_attention_blocks)
        ]

    def validate_fields(self) -> None:
        """Raise `ValueError` naming the first field that cannot describe an AlterNet."""
        check_cnn_config(self, FIELD_LIMITS, per_stage=("hidden_sizes", "num_attention_blocks", "num_attention_heads"))
        for i, (depth, m) in enumerate(zip(self.depths, self.num_attention_blocks)):
            if not isinstance(m, int) or m < 0:
                raise ValueError(f"AlterNetConfig.num_attention_blocks[{i}] must be >= 0, got {m!r}")
            if 2 * m > depth:
                raise ValueError(
                    f"AlterNetConfig.num_attention_blocks[{i}]={m} needs {2 * m} blocks (conv, MSA pairs) "
                    f"but depths[{i}]={depth}"
                )
