"""AlterNet: a pre-activation ResNet whose stages end in multi-head self-attention blocks.

Paper: Park & Kim, "How Do Vision Transformers Work?" (ICLR 2022), §4. MSAs are low-pass filters
that complement the high-pass convolutions, so the last blocks of a stage alternate conv and MSA.
Reference code: `xxxnell/how-do-vits-work`, `models/alternet.py`, computed exactly as there (alternet-hf's converter
maps its weights), except that maps the attention window does not divide are padded and the padded keys masked
(reference issue #38) and the relative-position index is a buffer that moves with the model.

This file imports only its configuration and `modeling_common`: they are copied next to the weights for
`trust_remote_code=True`.
"""

import torch
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedModel
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutputWithPooling, ImageClassifierOutput

from .configuration_alternet import AlterNetConfig
from .modeling_common import (
    DropPath,
    ZooModelMixin,
    add_residual,
    check_pixel_values,
    compute_layout,
    linear_drop_path_rates,
)


def conv1x1(in_channels: int, out_channels: int, stride: int = 1, bias: bool = False) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=stride, bias=bias)


def conv3x3(in_channels: int, out_channels: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=stride, padding=1, bias=False)


class AlterNetEmbeddings(nn.Module):
    """The stem. No norm or activation: each pre-activation block normalises its own input."""

    def __init__(self, config: AlterNetConfig):
        super().__init__()
        if config.stem_type == "cifar":
            self.convolution = conv3x3(config.num_channels, config.embedding_size)
            self.pooler = nn.Identity()
        else:
            self.convolution = nn.Conv2d(
                config.num_channels, config.embedding_size, kernel_size=7, stride=2, padding=3, bias=False
            )
            self.pooler = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        return self.pooler(self.convolution(pixel_values))


class AlterNetWindowAttention(nn.Module):
    """Multi-head self-attention inside non-overlapping `p×p` windows of a feature map, the windows folded into
    the batch (the 4-D tensors that SDPA and the exporters take).

    The relative-position bias is ONE learned `(2p-1)×(2p-1)` table shared by all heads; the bias of
    query `(ra, ca)` and key `(rb, cb)` is `table[rb - ra + p - 1, cb - ca + p - 1]`. Tokens of a
    window are numbered row-major; channels split into heads with the head as the outer factor.
    """

    def __init__(self, in_channels: int, out_channels: int, *, num_heads: int, head_dim: int, window_size: int):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.window_size = window_size
        inner_dim = num_heads * head_dim
        self.query = conv1x1(in_channels, inner_dim)
        self.key_value = conv1x1(in_channels, 2 * inner_dim)
        self.output = conv1x1(inner_dim, out_channels, bias=True)
        self.relative_position_bias_table = nn.Parameter(torch.zeros(2 * window_size - 1, 2 * window_size - 1))
        self.register_buffer("relative_position_index", self.build_relative_position_index(), persistent=False)

    def build_relative_position_index(self) -> torch.Tensor:
        """Flat index into the bias table for every (query, key) pair of a window: `(p², p²)`."""
        p = self.window_size
        coords = torch.stack(torch.meshgrid(torch.arange(p), torch.arange(p), indexing="ij")).flatten(1)  # (2, p²)
        offsets = coords[:, None, :] - coords[:, :, None] + (p - 1)  # (2, query, key): key minus query
        return offsets[0] * (2 * p - 1) + offsets[1]

    def forward(
        self, hidden_states: torch.Tensor, attn_implementation: str = "sdpa"
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The attended map, and with `attn_implementation="eager"` the weights `(batch, windows, heads, p², p²)`."""
        batch, _, height, width = hidden_states.shape
        p, heads, head_dim = self.window_size, self.num_heads, self.head_dim
        channels_last = hidden_states.is_contiguous(memory_format=torch.channels_last)
        pad_h, pad_w = -height % p, -width % p
        if pad_h or pad_w:
            hidden_states = F.pad(hidden_states, (0, pad_w, 0, pad_h))
        rows, cols = (height + pad_h) // p, (width + pad_w) // p

        def to_windows(x: torch.Tensor) -> torch.Tensor:
            # (B, heads·d, rows·p, cols·p) -> (B·rows·cols, heads, p², d)
            x = x.view(batch, heads, head_dim, rows, p, cols, p)
            return x.permute(0, 3, 5, 1, 4, 6, 2).reshape(batch * rows * cols, heads, p * p, head_dim)

        query = to_windows(self.query(hidden_states))
        key, value = (to_windows(x) for x in self.key_value(hidden_states).chunk(2, dim=1))
        bias = self.relative_position_bias_table.flatten()[self.relative_position_index]  # (p², p²)
        if pad_h or pad_w:
            mask = self.padding_mask(height, width, rows, cols, device=bias.device, dtype=bias.dtype)
            bias = bias + mask.repeat(batch, 1, 1, 1)  # (B·rows·cols, 1, p², p²), window index fastest
        bias = bias.to(query.dtype)

        if attn_implementation == "eager":
            scores = query @ key.transpose(-2, -1) * head_dim**-0.5 + bias
            # The weights returned are those the context is computed from, so `retain_grad()` on them works.
            attention_weights = scores.softmax(dim=-1).view(batch, rows * cols, heads, p * p, p * p)
            context = attention_weights.view(batch * rows * cols, heads, p * p, p * p) @ value
        elif attn_implementation == "sdpa":
            attention_weights = None
            context = F.scaled_dot_product_attention(query, key, value, attn_mask=bias)
        else:
            raise ValueError(f'attn_implementation must be "eager" or "sdpa", got {attn_implementation!r}')

        # (B·rows·cols, heads, p², d) -> (B, heads·d, rows·p, cols·p), laid out in memory as the input map was (a
        # channels-last map mixed with a contiguous one costs a slow strided pass in the residual sum). An explicit
        # copy, not `reshape`: exporters turn a reshape into a view where the strides seen while tracing allow one.
        context = context.view(batch, rows, cols, heads, p, p, head_dim)
        channels = heads * head_dim
        if channels_last:
            context = context.permute(0, 1, 4, 2, 5, 3, 6).contiguous().view(batch, rows * p, cols * p, channels)
            context = context.permute(0, 3, 1, 2)
        else:
            context = context.permute(0, 3, 6, 1, 4, 2, 5).contiguous().view(batch, channels, rows * p, cols * p)
        context = context[:, :, :height, :width]
        return self.output(context), attention_weights

    def padding_mask(self, height, width, rows, cols, *, device, dtype) -> torch.Tensor:
        """`-inf` on keys that fall in the zero padding: `(windows, 1, p², p²)`."""
        p = self.window_size
        valid = torch.zeros(rows * p, cols * p, dtype=torch.bool, device=device)
        valid[:height, :width] = True
        valid = valid.view(rows, p, cols, p).permute(0, 2, 1, 3).reshape(rows * cols, 1, 1, p * p)
        mask = torch.zeros(valid.shape, dtype=dtype, device=device).masked_fill(~valid, float("-inf"))
        return mask.expand(rows * cols, 1, p * p, p * p)

    def extra_repr(self) -> str:
        return f"num_heads={self.num_heads}, head_dim={self.head_dim}, window_size={self.window_size}"


class AlterNetBasicLayer(GradientCheckpointingLayer):
    """Pre-activation basic block: BN → ReLU → 3×3 (stride) → BN → ReLU → 3×3, plus the shortcut: a projection of the
    activated input where the shape changes, else the raw input (He et al. 2016, "Identity Mappings")."""

    def __init__(self, in_channels: int, out_channels: int, *, stride: int, drop_path_rate: float):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(in_channels)
        self.shortcut = (
            conv1x1(in_channels, out_channels, stride) if stride != 1 or in_channels != out_channels else None
        )
        self.conv1 = conv3x3(in_channels, out_channels, stride)
        self.norm2 = nn.BatchNorm2d(out_channels)
        self.conv2 = conv3x3(out_channels, out_channels)
        self.activation = nn.ReLU(inplace=True)  # on a fresh BN output, which BN's backward does not need
        self.drop_path = DropPath(drop_path_rate)

    def forward(self, x: torch.Tensor, attn_implementation: str = "sdpa") -> tuple[torch.Tensor, None]:
        activated = self.activation(self.norm1(x))
        shortcut = x if self.shortcut is None else self.shortcut(activated)
        residual = self.conv2(self.activation(self.norm2(self.conv1(activated))))
        return add_residual(self.drop_path, shortcut, residual), None


class AlterNetBottleNeckLayer(GradientCheckpointingLayer):
    """Pre-activation bottleneck: BN → ReLU → 1×1 → BN → ReLU → 3×3 (stride) → BN → ReLU → 1×1 (×4)."""

    def __init__(self, in_channels: int, out_channels: int, *, stride: int, drop_path_rate: float):
        super().__init__()
        width = out_channels // 4
        self.norm1 = nn.BatchNorm2d(in_channels)
        self.shortcut = (
            conv1x1(in_channels, out_channels, stride) if stride != 1 or in_channels != out_channels else None
        )
        self.conv1 = conv1x1(in_channels, width)
        self.norm2 = nn.BatchNorm2d(width)
        self.conv2 = conv3x3(width, width, stride)
        self.norm3 = nn.BatchNorm2d(width)
        self.conv3 = conv1x1(width, out_channels)
        self.activation = nn.ReLU(inplace=True)
        self.drop_path = DropPath(drop_path_rate)

    def forward(self, x: torch.Tensor, attn_implementation: str = "sdpa") -> tuple[torch.Tensor, None]:
        activated = self.activation(self.norm1(x))
        shortcut = x if self.shortcut is None else self.shortcut(activated)
        residual = self.conv1(activated)
        residual = self.conv2(self.activation(self.norm2(residual)))
        residual = self.conv3(self.activation(self.norm3(residual)))
        return add_residual(self.drop_path, shortcut, residual), None


class AlterNetAttentionLayer(GradientCheckpointingLayer):
    """MSA block: BN → GELU → 1×1 to the inner width (as the conv blocks' bottleneck) → BN → windowed MSA, plus the
    shortcut. No MLP inside: the conv block before it plays that role."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        expansion: int,
        num_heads: int,
        head_dim: int,
        window_size: int,
        drop_path_rate: float,
    ):
        super().__init__()
        width = in_channels // expansion
        self.norm1 = nn.BatchNorm2d(in_channels)
        self.activation = nn.GELU()
        self.shortcut = conv1x1(in_channels, out_channels) if in_channels != out_channels else None
        self.conv = conv1x1(in_channels, width)
        self.norm2 = nn.BatchNorm2d(width)
        self.attention = AlterNetWindowAttention(
            width, out_channels, num_heads=num_heads, head_dim=head_dim, window_size=window_size
        )
        self.drop_path = DropPath(drop_path_rate)

    def forward(self, x: torch.Tensor, attn_implementation: str = "sdpa") -> tuple[torch.Tensor, torch.Tensor | None]:
        activated = self.activation(self.norm1(x))
        shortcut = x if self.shortcut is None else self.shortcut(activated)
        residual, attention_weights = self.attention(self.norm2(self.conv(activated)), attn_implementation)
        return add_residual(self.drop_path, shortcut, residual), attention_weights


class AlterNetStage(nn.Module):
    def __init__(self, layers: list[nn.Module]):
        super().__init__()
        self.layers = nn.ModuleList(layers)


class AlterNetEncoder(nn.Module):
    """The stages; `config.stage_layouts()` says where the MSA blocks go, the first block carries the stride."""

    def __init__(self, config: AlterNetConfig):
        super().__init__()
        conv_layer = AlterNetBottleNeckLayer if config.block_type == "bottleneck" else AlterNetBasicLayer
        layouts = config.stage_layouts()
        rates = iter(linear_drop_path_rates(config.drop_path_rate, sum(config.depths)))
        in_channels, stages = config.embedding_size, []
        for stage_index, (layout, out_channels) in enumerate(zip(layouts, config.hidden_sizes)):
            layers = []
            for j, kind in enumerate(layout):
                stride = 2 if stage_index > 0 and j == 0 else 1
                if kind == "msa":
                    layer = AlterNetAttentionLayer(
                        in_channels,
                        out_channels,
                        expansion=config.expansion,
                        num_heads=config.num_attention_heads[stage_index],
                        head_dim=config.attention_head_dim,
                        window_size=config.window_size,
                        drop_path_rate=next(rates),
                    )
                else:
                    layer = conv_layer(in_channels, out_channels, stride=stride, drop_path_rate=next(rates))
                layers.append(layer)
                in_channels = out_channels
            stages.append(AlterNetStage(layers))
        self.stages = nn.ModuleList(stages)

    def blocks(self) -> list[nn.Module]:
        return [layer for stage in self.stages for layer in stage.layers]


class AlterNetPreTrainedModel(ZooModelMixin, PreTrainedModel):
    auto_classes = {"AutoModel": "AlterNetModel", "AutoModelForImageClassification": "AlterNetForImageClassification"}
    config_class = AlterNetConfig
    config: AlterNetConfig
    base_model_prefix = "alternet"
    _no_split_modules = ["AlterNetBasicLayer", "AlterNetBottleNeckLayer", "AlterNetAttentionLayer"]
    _supports_sdpa = True  # `attn_implementation="sdpa"` (the default) or `"eager"`; read by transformers

    @classmethod
    def _can_set_attn_implementation(cls) -> bool:
        # transformers guesses this from the source (an `*Attention(nn.Module)` must call its attention
        # interface); our window attention dispatches on `config._attn_implementation` itself.
        return True

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        super()._init_weights(module)
        if isinstance(module, AlterNetWindowAttention):
            nn.init.normal_(module.relative_position_bias_table, std=0.02)
            # Non-persistent, so never in a checkpoint: refilled here after `from_pretrained`, in place on the
            # device transformers gave the buffer (the table itself may be offloaded, i.e. on `meta`).
            module.relative_position_index.copy_(module.build_relative_position_index())

    def block_kinds(self) -> list[str]:
        """The kind of each entry of `output_hidden_states`: the stem, every residual block, the head input."""
        return ["stem"] + [kind for layout in self.config.stage_layouts() for kind in layout] + ["head"]

    @property
    def total_stride(self) -> int:
        """Downsampling from input to the last stage: the smallest input side the model accepts."""
        stem_stride = 1 if self.config.stem_type == "cifar" else 4
        return stem_stride * 2 ** (len(self.config.depths) - 1)


class AlterNetModel(AlterNetPreTrainedModel):
    def __init__(self, config: AlterNetConfig):
        super().__init__(config)
        self.embedder = AlterNetEmbeddings(config)
        self.encoder = AlterNetEncoder(config)
        self.norm = nn.BatchNorm2d(config.hidden_sizes[-1])
        self.activation = nn.ReLU(inplace=True)
        self.pooler = nn.AdaptiveAvgPool2d(1)
        self.post_init()

    def forward(
        self,
        pixel_values: torch.Tensor,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
    ) -> BaseModelOutputWithPooling | tuple:
        output_hidden_states = (
            output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states
        )
        output_attentions = output_attentions if output_attentions is not None else self.config.output_attentions
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        pixel_values = check_pixel_values(
            pixel_values,
            num_channels=self.config.num_channels,
            image_size=self.config.image_size,
            min_size=self.total_stride,
            dtype=self.embedder.convolution.weight.dtype,
        )
        pixel_values = compute_layout(pixel_values)
        # Attention weights come from the eager path only; SDPA computes the same output without them.
        attn_implementation = "eager" if output_attentions else self.config._attn_implementation

        hidden_state = self.embedder(pixel_values)
        hidden_states, attentions = [hidden_state], []
        for block in self.encoder.blocks():
            hidden_state, attention_weights = block(hidden_state, attn_implementation)
            hidden_states.append(hidden_state)
            if attention_weights is not None:
                attentions.append(attention_weights)
        hidden_state = self.activation(self.norm(hidden_state))  # pre-activation nets normalise before the head
        hidden_states.append(hidden_state)
        pooled_output = self.pooler(hidden_state).flatten(1)

        hidden_states = tuple(hidden_states) if output_hidden_states else None
        attentions = tuple(attentions) if output_attentions else None
        if not return_dict:
            return tuple(v for v in (hidden_state, pooled_output, hidden_states, attentions) if v is not None)
        return BaseModelOutputWithPooling(
            last_hidden_state=hidden_state,
            pooler_output=pooled_output,
            hidden_states=hidden_states,
            attentions=attentions,
        )


class AlterNetForImageClassification(AlterNetPreTrainedModel):
    def __init__(self, config: AlterNetConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.alternet = AlterNetModel(config)
        self.classifier = (
            nn.Linear(config.hidden_sizes[-1], config.num_labels) if config.num_labels > 0 else nn.Identity()
        )
        self.post_init()

    def forward(
        self,
        pixel_values: torch.Tensor,
        labels: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,
        output_attentions: bool | None = None,
        return_dict: bool | None = None,
    ) -> ImageClassifierOutput | tuple:
        """Logits, and the `loss` when `labels` are given (`modeling_common.image_classification_loss`);
        `attentions` holds one `(batch, windows, heads, p², p²)` tensor per MSA block."""
        return_dict = return_dict if return_dict is not None else self.config.return_dict
        outputs = self.alternet(
            pixel_values,
            output_hidden_states=output_hidden_states,
            output_attentions=output_attentions,
            return_dict=True,
        )
        logits = self.classifier(outputs.pooler_output)
        loss = self.loss_function(labels, logits, self.config) if labels is not None else None
        if not return_dict:
            output = (logits,) + tuple(v for v in (outputs.hidden_states, outputs.attentions) if v is not None)
            return ((loss,) + output) if loss is not None else output
        return ImageClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )
