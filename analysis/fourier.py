"""Relative log amplitude of Fourier-transformed feature maps, ΔlogA (Park & Kim 2022, Fig. 2; docs/paper.md §6).

Unlike the reference notebook, which reads the half-diagonal up to index H−1, one step short of π (3π/4 on an 8×8
map), while labelling that point π, every curve here ends at the corner of the shifted spectrum, the Nyquist frequency
π itself. Maps of different sizes share one frequency grid by linear interpolation, and each block's own change is
reported (`delta_log_amplitude`), so an identity block reads 0.
"""

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from . import shared
from .blocks import accumulate
from .shared import AnalysisResult, new_axes


@dataclass
class FourierResult(AnalysisResult):
    """`relative_log_amplitude[i]` is state i's ΔlogA curve over `frequencies` (units of π); state 0 is
    the input image and state i ≥ 1 the output of block i-1, of kind `kinds[i]`. `delta_log_amplitude`
    holds each block's change, state i+1 minus state i (one row per block)."""

    frequencies: np.ndarray
    relative_log_amplitude: np.ndarray
    delta_log_amplitude: np.ndarray
    kinds: list[str]
    # Over images: {block kind: standard error of the mean change of ΔlogA at π over that kind's blocks}, from
    # each image's own value (they average to `delta_log_amplitude[:, -1]`); empty where not measured.
    kind_change_error: dict[str, float] = field(default_factory=dict)

    @property
    def high_frequency(self) -> np.ndarray:
        """ΔlogA at π of every state: the paper's by-depth summary."""
        return self.relative_log_amplitude[:, -1]


def half_log_amplitude(feature_map: torch.Tensor) -> torch.Tensor:
    """log(|fft2| + 1e-6) of every image and channel over the non-negative column frequencies, (B, C, H, W//2 + 1):
    a real map's spectrum is conjugate-symmetric, so `rfft2`'s half holds every amplitude in half the work."""
    return torch.log(torch.fft.rfft2(feature_map.double()).abs() + 1e-6)


def full_plane(half: torch.Tensor, width: int) -> torch.Tensor:
    """The (H, W) plane of a real map's amplitudes from its (H, W//2 + 1) half, zero frequency at the centre."""
    height = half.shape[-2]
    # columns W//2+1 … W-1 mirror columns W//2 … 1 (odd W: (W-1)/2 … 1) of the negated rows: |F(r, c)| = |F(-r, -c)|
    mirrored = half[(-torch.arange(height)) % height][:, torch.arange(width - width // 2 - 1, 0, -1)]
    return torch.fft.fftshift(torch.cat([half, mirrored], dim=-1), dim=(-2, -1))


def mean_log_amplitude(feature_map: torch.Tensor) -> torch.Tensor:
    """log(|fft2| + 1e-6) with zero frequency at the centre, averaged over batch and channels: (H, W)."""
    return full_plane(half_log_amplitude(feature_map).mean(dim=(0, 1)), feature_map.shape[-1])


def half_diagonal(log_amplitude: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Frequencies (units of π) and values along the diagonal from the centre of a shifted spectrum to its corner:
    π exactly for an even side, (n-1)/n·π for an odd side n."""
    side = log_amplitude.shape[-1]
    if log_amplitude.shape[-2] != side:
        raise ValueError(f"Fourier ΔlogA needs square feature maps, got {tuple(log_amplitude.shape)}")
    centre = side // 2
    diagonal = log_amplitude.diagonal()
    values = diagonal[centre:]
    if side % 2 == 0:
        values = torch.cat([values, diagonal[:1]])  # index 0 after the shift is -π ≡ π
    values = values.cpu().numpy()
    return 2.0 * np.arange(len(values)) / side, values - values[0]


def high_frequency_per_image(feature_map: torch.Tensor) -> torch.Tensor:
    """Each image's ΔlogA at π (the last point of `half_diagonal`, channels averaged): (B,)."""
    return high_frequency_of(half_log_amplitude(feature_map))


def high_frequency_of(half: torch.Tensor) -> torch.Tensor:
    """`high_frequency_per_image` from a map's `half_log_amplitude`."""
    side = half.shape[-2]
    # the corner of the shifted plane, π (or (n-1)/n·π on an odd side), is the unshifted bin (n//2, n//2)
    return (half[..., side // 2, side // 2] - half[..., 0, 0]).mean(dim=1)


class ImageSpread:
    """Per block kind, the mean and standard error over images of a per-image statistic averaged over the blocks
    of that kind (each block's value: a state's minus the state before it)."""

    def __init__(self):
        self.sums: dict[str, np.ndarray] = {}

    def update(self, kinds: list[str], per_state: np.ndarray) -> None:
        """`per_state`: (states, images), states aligned with `kinds` (the input first); NaN where no map."""
        changes = np.diff(per_state, axis=0)
        block_kinds = np.asarray(kinds[1:])
        for kind in dict.fromkeys(block_kinds):  # in order of depth: the same JSON from every interpreter
            chosen = changes[block_kinds == kind]
            chosen = chosen[np.isfinite(chosen).all(axis=1)]
            if len(chosen):
                values = chosen.mean(axis=0)
                total = np.array([values.size, values.sum(), (values**2).sum()])
                self.sums[kind] = self.sums.get(kind, 0) + total

    def errors(self) -> dict[str, float]:
        errors = {}
        for kind, (count, total, squares) in self.sums.items():
            if count > 1:
                variance = max(squares - total**2 / count, 0.0) / (count - 1)
                errors[kind] = float(np.sqrt(variance / count))
        return errors


class FourierAccumulator:
    """ΔlogA of every state, accumulated over the batches of `analysis.blocks.block_batches`."""

    def __init__(self, num_frequencies: int | None = None):
        self.num_frequencies = num_frequencies
        self.sums, self.count, self.kinds = None, 0, None
        self.spread = ImageSpread()

    def update(self, batch) -> None:
        self.kinds = batch.kinds
        size = len(batch.maps[0])
        halves = [None if m is None else half_log_amplitude(m) for m in batch.maps]  # one FFT per map serves both
        amplitudes = [
            None if h is None else full_plane(h.mean(dim=(0, 1)), m.shape[-1]) * size
            for m, h in zip(batch.maps, halves)
        ]
        if self.sums is None:
            self.sums = amplitudes
        else:
            self.sums = [None if s is None else s + a for s, a in zip(self.sums, amplitudes)]
        self.count += size
        per_image = [np.full(size, np.nan) if h is None else high_frequency_of(h).cpu().numpy() for h in halves]
        self.spread.update(batch.kinds, np.stack(per_image))

    def result(self) -> FourierResult:
        if self.sums is None:
            raise ValueError("no images were given")
        curves = [None if s is None else half_diagonal(s / self.count) for s in self.sums]
        longest = max(len(c[0]) for c in curves if c is not None)
        frequencies = np.linspace(0.0, 1.0, self.num_frequencies or longest)
        relative = np.stack(
            [np.full_like(frequencies, np.nan) if c is None else np.interp(frequencies, *c) for c in curves]
        )
        return FourierResult(frequencies, relative, np.diff(relative, axis=0), self.kinds, self.spread.errors())


def fourier_log_amplitude(model: nn.Module, images, *, num_frequencies: int | None = None, **options) -> FourierResult:
    """ΔlogA by frequency of the input and every block output of `model` on `images` (normalised inputs, a batch or a
    DataLoader), on `num_frequencies` points of [0, π] (default: the largest map's); `options` as
    `analysis.blocks.block_batches` takes them (adapter, max_batches, device, progress). A `FourierAccumulator` given
    to `analysis.blocks.accumulate` computes it in one pass with other per-block analyses."""
    return accumulate(model, images, [FourierAccumulator(num_frequencies)], desc="fourier", **options)[0]


def plot_fourier(result: FourierResult, ax=None):
    """ΔlogA at π by depth, MSA and downsampling blocks shaded: the paper's Fig. 2 (right)."""
    return shared.plot_by_depth(
        result.high_frequency,
        result.kinds,
        ax,
        ylabel="ΔlogA at π",
        title="High-frequency log amplitude",
        color="tab:blue",
    )


def plot_fourier_curves(result: FourierResult, ax=None):
    """ΔlogA over frequency for every state, coloured from shallow to deep: the paper's Fig. 2 (left)."""
    import matplotlib.pyplot as plt

    ax = new_axes(ax)
    colours = plt.cm.plasma(np.linspace(0.0, 0.9, len(result.kinds)))
    for curve, colour in zip(result.relative_log_amplitude, colours):
        ax.plot(result.frequencies, curve, color=colour, linewidth=1)
    ax.set_xlim(0, 1)
    ax.set_xticks([0, 0.5, 1], ["0", "0.5π", "π"])
    ax.set_xlabel("frequency")
    ax.set_ylabel("ΔlogA")
    ax.figure.colorbar(
        plt.cm.ScalarMappable(cmap="plasma", norm=plt.Normalize(0, len(result.kinds) - 1)), ax=ax, label="depth"
    )
    return ax


# --- as the analysis commands run it (analysis.registry) -------------------------------------------------------


def fourier_figure(result: FourierResult):
    figure, axes = shared.row_of_axes(2, 5, 3.5)
    plot_fourier_curves(result, ax=axes[0])
    plot_fourier(result, ax=axes[1])
    return figure


def fourier_summary(result: FourierResult) -> str:
    value, kind = shared.last_with_map(result.high_frequency, result.kinds)
    start = result.high_frequency[1]
    return f"fourier: ΔlogA at π from {start:.2f} (stem) to {value:.2f} ({kind}, the last with a map)"


def fourier_by_depth(found: dict[str, FourierResult]):
    return shared.by_depth_figure(
        {name: (r.high_frequency, r.kinds) for name, r in found.items()},
        ylabel="ΔlogA at π",
        title="High-frequency ΔlogA by depth (Fig. 2c / 8)",
    )


def fourier_spectra(found: dict[str, FourierResult]):
    return shared.panels(found, plot_fourier_curves, "ΔlogA spectra (Fig. 2a)", (3.6, 3.2))
