"""Independent, functional forward passes over the reference code's checkpoint layouts.

Written from the reference's documented computation (docs/paper.md §2-3: key names, op order, window
rearrangement and relative-position convention), not from its code, to give the converters a golden
target that does not share a line with `alternet_hf`.
"""

import torch
import torch.nn.functional as F
from einops import rearrange


def _bn(x, sd, prefix):
    return F.batch_norm(
        x,
        sd[prefix + "running_mean"],
        sd[prefix + "running_var"],
        sd[prefix + "weight"],
        sd[prefix + "bias"],
        training=False,
        eps=1e-5,
    )


def _stages(sd):
    return sorted({int(k[5]) for k in sd if k.startswith("layer") and k[5] != "0"})


def _blocks(sd, stage):
    indices = sorted({int(k.split(".")[1]) for k in sd if k.startswith(f"layer{stage}.")})
    return [f"layer{stage}.{i}." for i in indices]


def resnet_forward(sd, x):
    """Post-activation ResNet: stem conv-BN-ReLU, bottlenecks or basic blocks, GAP, linear."""
    x = F.relu(_bn(F.conv2d(x, sd["layer0.0.weight"], padding=1), sd, "layer0.1."))
    for stage in _stages(sd):
        for j, p in enumerate(_blocks(sd, stage)):
            stride = 2 if stage > 1 and j == 0 else 1
            skip = x
            if p + "shortcut.0.weight" in sd:
                skip = _bn(F.conv2d(x, sd[p + "shortcut.0.weight"], stride=stride), sd, p + "shortcut.1.")
            convs = [k for k in ("conv1", "conv2", "conv3") if p + k + ".0.weight" in sd]
            strided = 0 if len(convs) == 2 else 1  # basic blocks stride their first conv, bottlenecks the 3x3
            out = x
            for i, name in enumerate(convs):
                w = sd[p + name + ".0.weight"]
                out = F.conv2d(out, w, stride=stride if i == strided else 1, padding=w.shape[-1] // 2)
                out = _bn(out, sd, p + name + ".1.")
                if i < len(convs) - 1:
                    out = F.relu(out)
            x = F.relu(out + skip)
    x = x.mean(dim=(2, 3))
    return F.linear(x, sd["classifier.0.dense.weight"], sd["classifier.0.dense.bias"])


def _local_attention(x, sd, p, heads, window):
    table = sd[p + "attn.pos_embedding"]
    coords = torch.tensor([[r, c] for r in range(window) for c in range(window)])
    rel = coords[None, :, :] - coords[:, None, :] + window - 1  # [query, key] -> key minus query
    bias = table[rel[..., 0], rel[..., 1]]
    n1, n2 = x.shape[2] // window, x.shape[3] // window
    x = rearrange(x, "b c (n1 p1) (n2 p2) -> (b n1 n2) c p1 p2", p1=window, p2=window)
    q = F.conv2d(x, sd[p + "attn.attn.to_q.weight"])
    k, v = F.conv2d(x, sd[p + "attn.attn.to_kv.weight"]).chunk(2, dim=1)
    q, k, v = (rearrange(t, "b (h d) x y -> b h (x y) d", h=heads) for t in (q, k, v))
    dots = torch.einsum("bhid,bhjd->bhij", q, k) * q.shape[-1] ** -0.5 + bias
    out = torch.einsum("bhij,bhjd->bhid", dots.softmax(dim=-1), v)
    out = rearrange(out, "b h (x y) d -> b (h d) x y", x=window, y=window)
    out = F.conv2d(out, sd[p + "attn.attn.to_out.0.weight"], sd[p + "attn.attn.to_out.0.bias"])
    return rearrange(out, "(b n1 n2) c p1 p2 -> b c (n1 p1) (n2 p2)", n1=n1, n2=n2)


def alternet_forward(sd, x, heads=(3, 6, 12, 24), head_dim=64):
    """Pre-activation AlterNet with the CIFAR stem."""
    x = F.conv2d(x, sd["layer0.layer0.0.weight"], padding=1)
    for stage in _stages(sd):
        for j, p in enumerate(_blocks(sd, stage)):
            stride = 2 if stage > 1 and j == 0 else 1
            is_msa = p + "attn.pos_embedding" in sd
            norm = p + ("norm1." if is_msa else "bn.")
            act = F.gelu if is_msa else F.relu
            if p + "shortcut.0.weight" in sd:
                x = act(_bn(x, sd, norm))
                skip = F.conv2d(x, sd[p + "shortcut.0.weight"], stride=stride)
            else:
                skip = x
                x = act(_bn(x, sd, norm))
            if is_msa:
                window = (sd[p + "attn.pos_embedding"].shape[0] + 1) // 2
                h = sd[p + "attn.attn.to_q.weight"].shape[0] // head_dim
                x = _bn(F.conv2d(x, sd[p + "conv.weight"]), sd, p + "norm2.")
                x = _local_attention(x, sd, p, h, window)
            else:
                w1 = sd[p + "conv1.weight"]
                x = F.conv2d(x, w1, stride=stride if w1.shape[-1] == 3 else 1, padding=w1.shape[-1] // 2)
                w2 = sd[p + "conv2.2.weight"]
                x = F.conv2d(
                    F.relu(_bn(x, sd, p + "conv2.0.")), w2, stride=stride if w1.shape[-1] == 1 else 1, padding=1
                )
                if p + "conv3.2.weight" in sd:
                    x = F.conv2d(F.relu(_bn(x, sd, p + "conv3.0.")), sd[p + "conv3.2.weight"])
            x = x + skip
    x = F.relu(_bn(x, sd, "classifier.0.bn.")).mean(dim=(2, 3))
    return F.linear(x, sd["classifier.0.dense.weight"], sd["classifier.0.dense.bias"])


def _rand_bn(sd, prefix, channels, gen):
    sd[prefix + "weight"] = 1 + 0.1 * torch.randn(channels, generator=gen)
    sd[prefix + "bias"] = 0.1 * torch.randn(channels, generator=gen)
    sd[prefix + "running_mean"] = 0.1 * torch.randn(channels, generator=gen)
    sd[prefix + "running_var"] = 0.5 + torch.rand(channels, generator=gen)
    sd[prefix + "num_batches_tracked"] = torch.tensor(7)


def _rand_conv(sd, key, out_c, in_c, k, gen):
    sd[key] = torch.randn(out_c, in_c, k, k, generator=gen) * (2 / (in_c * k * k)) ** 0.5


def reference_resnet_state_dict(depths, widths, expansion, num_classes, stem=64, seed=0):
    """Reference ResNet keys (docs/paper.md §3) filled with random values."""
    gen, sd = torch.Generator().manual_seed(seed), {}
    _rand_conv(sd, "layer0.0.weight", stem, 3, 3, gen)
    _rand_bn(sd, "layer0.1.", stem, gen)
    in_c = stem
    for s, (depth, width) in enumerate(zip(depths, widths), start=1):
        out_c = width * expansion
        for j in range(depth):
            p = f"layer{s}.{j}."
            if j == 0 and (s > 1 or in_c != out_c):
                _rand_conv(sd, p + "shortcut.0.weight", out_c, in_c, 1, gen)
                _rand_bn(sd, p + "shortcut.1.", out_c, gen)
            shapes = (
                [(width, in_c, 3), (out_c, width, 3)]
                if expansion == 1
                else [(width, in_c, 1), (width, width, 3), (out_c, width, 1)]
            )
            for i, (o, c, k) in enumerate(shapes, start=1):
                _rand_conv(sd, p + f"conv{i}.0.weight", o, c, k, gen)
                _rand_bn(sd, p + f"conv{i}.1.", o, gen)
            in_c = out_c
    sd["classifier.0.dense.weight"] = 0.05 * torch.randn(num_classes, in_c, generator=gen)
    sd["classifier.0.dense.bias"] = 0.05 * torch.randn(num_classes, generator=gen)
    return sd


def reference_alternet_state_dict(
    depths, widths, expansion, msa_blocks, heads, num_classes, window=4, head_dim=64, stem=64, seed=0
):
    """Reference AlterNet keys (docs/paper.md §2: `layer0.layer0.0`, `bn`/`conv1`/`conv2.0`/`conv2.2`..., MSA
    `norm1`/`conv`/`norm2`/`attn.pos_embedding`/`attn.attn.to_q|to_kv|to_out.0`, head `classifier.0.bn|dense`)."""
    gen, sd = torch.Generator().manual_seed(seed), {}
    _rand_conv(sd, "layer0.layer0.0.weight", stem, 3, 3, gen)
    in_c = stem
    for s, (depth, width, m, h) in enumerate(zip(depths, widths, msa_blocks, heads), start=1):
        out_c = width * expansion
        layout = [False] * (depth - 2 * m) + [False, True] * m
        for j, is_msa in enumerate(layout):
            p = f"layer{s}.{j}."
            if j == 0 and (s > 1 or in_c != out_c):
                _rand_conv(sd, p + "shortcut.0.weight", out_c, in_c, 1, gen)
            if is_msa:
                inner = in_c // expansion
                _rand_bn(sd, p + "norm1.", in_c, gen)
                _rand_conv(sd, p + "conv.weight", inner, in_c, 1, gen)
                _rand_bn(sd, p + "norm2.", inner, gen)
                sd[p + "attn.pos_embedding"] = torch.randn(2 * window - 1, 2 * window - 1, generator=gen)
                _rand_conv(sd, p + "attn.attn.to_q.weight", h * head_dim, inner, 1, gen)
                _rand_conv(sd, p + "attn.attn.to_kv.weight", 2 * h * head_dim, inner, 1, gen)
                _rand_conv(sd, p + "attn.attn.to_out.0.weight", out_c, h * head_dim, 1, gen)
                sd[p + "attn.attn.to_out.0.bias"] = 0.1 * torch.randn(out_c, generator=gen)
            else:
                _rand_bn(sd, p + "bn.", in_c, gen)
                if expansion == 1:
                    _rand_conv(sd, p + "conv1.weight", width, in_c, 3, gen)
                    _rand_bn(sd, p + "conv2.0.", width, gen)
                    _rand_conv(sd, p + "conv2.2.weight", out_c, width, 3, gen)
                else:
                    _rand_conv(sd, p + "conv1.weight", width, in_c, 1, gen)
                    _rand_bn(sd, p + "conv2.0.", width, gen)
                    _rand_conv(sd, p + "conv2.2.weight", width, width, 3, gen)
                    _rand_bn(sd, p + "conv3.0.", width, gen)
                    _rand_conv(sd, p + "conv3.2.weight", out_c, width, 1, gen)
            in_c = out_c
    _rand_bn(sd, "classifier.0.bn.", in_c, gen)
    sd["classifier.0.dense.weight"] = 0.05 * torch.randn(num_classes, in_c, generator=gen)
    sd["classifier.0.dense.bias"] = 0.05 * torch.randn(num_classes, generator=gen)
    return sd
