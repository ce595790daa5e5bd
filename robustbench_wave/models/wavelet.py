"""Fixed wavelet front-end of the wavelet tokenizer (Zhu & Soricut 2024, arXiv 2405.18616; spec.md §2).

Every step is a torch operation so that autograd sees the exact input gradient:

1. RGB -> YCbCr (JPEG/JFIF full range) with 2x2 mean down-sampling of the chroma; grayscale is used as Y.
2. 1-D filters come from ``pywt.Wavelet(name)``; the 2-D kernels are outer products (rows index y).
3. One DWT level is a grouped, stride-2 convolution over a circularly wrapped input; it equals
   ``pywt.dwt2(..., mode="periodization")`` and is orthogonal, so its adjoint (a transposed convolution
   folded back onto the circle) is its exact inverse.
4. Y gets ``L`` levels, Cb/Cr (already at N/2) get ``L-1``; all coarsest bands share the N/2^L grid.
5. The pixel-space embedding W (B, T, C) stacks, per token, the coarsest approximation and details plus
   the finer details of the same region (space-to-depth), in per-level blocks, coarsest first.
6. Per-image sparsification zeroes the smallest-magnitude fraction ``s`` of W.

Band order follows PyWavelets: ``[A, H, V, D]`` = ``[cA, cH, cV, cD]`` of ``pywt.dwt2``, i.e. the kernels
``l⊗l, h⊗l, l⊗h, h⊗h`` with the first factor along y (rows) and the second along x (columns).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import pywt
import torch
import torch.nn.functional as F

from robustbench_wave.models.frontend import FixedFrontEnd

# JPEG / JFIF full-range BT.601, on the [0, 1] scale.
_RGB_TO_YCBCR = (
    (0.299, 0.587, 0.114),
    (-0.168736, -0.331264, 0.5),
    (0.5, -0.418688, -0.081312),
)
_YCBCR_OFFSET = (0.0, 0.5, 0.5)


def rgb_to_ycbcr(x: torch.Tensor) -> torch.Tensor:
    """(B, 3, H, W) RGB in [0, 1] -> (B, 3, H, W) YCbCr in [0, 1] (JFIF)."""
    matrix = x.new_tensor(_RGB_TO_YCBCR)
    offset = x.new_tensor(_YCBCR_OFFSET).view(1, 3, 1, 1)
    return torch.einsum("oc,bchw->bohw", matrix, x) + offset


@dataclass(frozen=True)
class FilterBank:
    """Decomposition filters of an orthogonal wavelet, as given by PyWavelets."""

    name: str
    dec_lo: tuple[float, ...]
    dec_hi: tuple[float, ...]

    @property
    def length(self) -> int:
        return len(self.dec_lo)


@cache
def filter_bank(name: str) -> FilterBank:
    """Look up ``pywt.Wavelet(name)``; only orthogonal wavelets give an orthogonal, exactly invertible DWT."""
    try:
        wavelet = pywt.Wavelet(name)
    except ValueError:
        raise ValueError(
            f"unknown wavelet {name!r}; use a discrete orthogonal PyWavelets name such as 'db1', 'db2', 'coif1'"
        ) from None
    if not wavelet.orthogonal:
        raise ValueError(
            f"wavelet {name!r} is not orthogonal; the tokenizer needs an orthogonal one (db*, coif*, sym*)"
        )
    return FilterBank(name, tuple(wavelet.dec_lo), tuple(wavelet.dec_hi))


def _kernels(bank: FilterBank, channels: int, like: torch.Tensor) -> torch.Tensor:
    """Grouped-conv weight (4·channels, 1, F, F): cross-correlation kernels of [A, H, V, D]."""
    lo = like.new_tensor(bank.dec_lo).flip(0)  # pywt convolves; conv2d correlates
    hi = like.new_tensor(bank.dec_hi).flip(0)
    bands = torch.stack(
        [torch.outer(lo, lo), torch.outer(hi, lo), torch.outer(lo, hi), torch.outer(hi, hi)]
    )  # (4, F, F), first factor along y
    return bands.unsqueeze(1).repeat(channels, 1, 1, 1)


def _wrap_index(size: int, pad: int, device: torch.device) -> torch.Tensor:
    """Indices of a signal circularly padded by ``pad`` samples on each side (works even when pad > size)."""
    return torch.arange(-pad, size + pad, device=device) % size


def dwt2(x: torch.Tensor, bank: FilterBank) -> torch.Tensor:
    """One periodized 2-D DWT level: (B, C, H, W) -> (B, C, 4, H/2, W/2) with bands [A, H, V, D]."""
    batch, channels, height, width = x.shape
    if height % 2 or width % 2:
        raise ValueError(f"a DWT level needs even height and width, got {height}x{width}")
    pad = (bank.length - 2) // 2  # periodization: (F-2)/2 wrapped samples per side
    if pad:  # Haar (db1) needs no wrapped samples: skip two identity gathers
        x = x.index_select(2, _wrap_index(height, pad, x.device))
        x = x.index_select(3, _wrap_index(width, pad, x.device))
    out = F.conv2d(x, _kernels(bank, channels, x), stride=2, groups=channels)
    return out.view(batch, channels, 4, height // 2, width // 2)


def idwt2(coeffs: torch.Tensor, bank: FilterBank) -> torch.Tensor:
    """Inverse of :func:`dwt2` (its adjoint, which is exact because the transform is orthogonal)."""
    batch, channels, _, half_h, half_w = coeffs.shape
    height, width = 2 * half_h, 2 * half_w
    pad = (bank.length - 2) // 2  # periodization: (F-2)/2 wrapped samples per side
    y = F.conv_transpose2d(
        coeffs.reshape(batch, channels * 4, half_h, half_w),
        _kernels(bank, channels, coeffs),
        stride=2,
        groups=channels,
    )  # (B, C, H + 2pad, W + 2pad): the wrapped samples, to be folded back onto the circle
    rows = y.new_zeros(batch, channels, height, width + 2 * pad).index_add_(
        2, _wrap_index(height, pad, y.device), y
    )
    out = y.new_zeros(batch, channels, height, width).index_add_(3, _wrap_index(width, pad, y.device), rows)
    return out


def wavedec2(x: torch.Tensor, bank: FilterBank, levels: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Multi-level DWT: returns the coarsest approximation (B, C, h, w) and details, finest first.

    ``details[k-1]`` is level k's (B, C, 3, H/2^k, W/2^k) tensor of [H, V, D] bands.
    """
    details = []
    approx = x
    for _ in range(levels):
        bands = dwt2(approx, bank)
        approx = bands[:, :, 0]
        details.append(bands[:, :, 1:])
    return approx, details


def waverec2(approx: torch.Tensor, details: list[torch.Tensor], bank: FilterBank) -> torch.Tensor:
    """Inverse of :func:`wavedec2`."""
    x = approx
    for detail in reversed(details):
        x = idwt2(torch.cat([x.unsqueeze(2), detail], dim=2), bank)
    return x


def block_sizes(in_chans: int, levels: int) -> list[int]:
    """Per-level block sizes C_k of W, coarsest level (k = L) first (spec.md §2.5)."""
    if in_chans == 1:
        return [4] + [3 * 4 ** (levels - k) for k in range(levels - 1, 0, -1)]
    coarsest = (
        12 if levels >= 2 else 6
    )  # L = 1: chroma is not transformed, its raw N/2 samples join Y's bands
    middle = [9 * 4 ** (levels - k) for k in range(levels - 1, 1, -1)]
    finest = [3 * 4 ** (levels - 1)] if levels >= 2 else []
    return [coarsest, *middle, *finest]


def _space_to_depth(bands: torch.Tensor, factor: int) -> torch.Tensor:
    """(B, C, K, h·f, w·f) -> (B, C·K·f², h, w) so a token carries every finer coefficient of its region."""
    batch, channels, nb, height, width = bands.shape
    flat = bands.reshape(batch, channels * nb, height, width)
    return F.pixel_unshuffle(flat, factor) if factor > 1 else flat


def _depth_to_space(tokens: torch.Tensor, channels: int, nb: int, factor: int) -> torch.Tensor:
    flat = F.pixel_shuffle(tokens, factor) if factor > 1 else tokens
    batch, _, height, width = flat.shape
    return flat.view(batch, channels, nb, height, width)


class WaveletFrontEnd(FixedFrontEnd):
    """Colour transform + L-level DWT + pixel-space embedding + per-image sparsification (no parameters).

    ``transform(x)`` is the exact (sparsified) pixel-space embedding; ``smooth_transform(x)`` is the same
    linear map without the sparsification mask, which BPDA uses as its backward approximation.
    """

    def __init__(
        self,
        img_size: int,
        in_chans: int,
        levels: int = 2,
        wavelet: str = "db1",
        zero_fraction: float = 0.8,
        exempt_approximation: bool = False,
        level_shift: bool = True,
    ) -> None:
        super().__init__()
        if in_chans not in (1, 3):
            raise ValueError(f"the wavelet tokenizer takes 1 (gray) or 3 (RGB) channels, got {in_chans}")
        if levels < 1:
            raise ValueError(f"levels must be >= 1, got {levels}")
        if img_size % (2**levels):
            raise ValueError(
                f"image size {img_size} is not divisible by 2^levels = {2**levels}; pad or resize the images, "
                f"or choose fewer levels"
            )
        if not 0.0 <= zero_fraction < 1.0:
            raise ValueError(f"zero_fraction must be in [0, 1), got {zero_fraction}")
        self.bank = filter_bank(wavelet)
        self.wavelet = wavelet
        self.img_size = img_size
        self.in_chans = in_chans
        self.levels = levels
        self.zero_fraction = zero_fraction
        self.exempt_approximation = exempt_approximation
        self.level_shift = level_shift
        self.grid_size = img_size // 2**levels
        self.num_tokens = self.grid_size**2
        self.block_sizes = block_sizes(in_chans, levels)
        self.embed_dim = sum(self.block_sizes)
        self.register_buffer("approx_mask", self._approximation_mask(), persistent=False)
        self.n_approx = int(self.approx_mask.sum())  # approximation entries per token

    # -- the linear part -------------------------------------------------------------------------------
    def _planes(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Y plane (B, 1, N, N) and, for colour, the down-sampled CbCr planes (B, 2, N/2, N/2).

        With ``level_shift`` every plane is centred by subtracting 0.5 first, JPEG2000's DC level shift:
        without it a mid-gray image puts a large constant into every approximation coefficient, which
        dominates the token embeddings and the magnitude ranking of the sparsification.
        """
        ycbcr = x if self.in_chans == 1 else rgb_to_ycbcr(x)
        if self.level_shift:
            ycbcr = ycbcr - 0.5
        if self.in_chans == 1:
            return [ycbcr]
        return [ycbcr[:, :1], F.avg_pool2d(ycbcr[:, 1:], 2)]

    def pixel_embedding(self, x: torch.Tensor) -> torch.Tensor:
        """Dense W: (B, C_in, N, N) -> (B, T, C), blocks ordered coarsest level first. Linear in x (up to the
        constant chroma offset)."""
        if x.shape[-2:] != (self.img_size, self.img_size) or x.shape[1] != self.in_chans:
            raise ValueError(
                f"the wavelet front-end expects (B, {self.in_chans}, {self.img_size}, {self.img_size}) inputs, "
                f"got {tuple(x.shape)}"
            )
        planes = self._planes(x)
        luma_a, luma_d = wavedec2(planes[0], self.bank, self.levels)
        blocks_by_level: dict[int, list[torch.Tensor]] = {k: [] for k in range(1, self.levels + 1)}
        coarsest = [torch.cat([luma_a.unsqueeze(2), luma_d[-1]], dim=2)]  # (B, 1, 4, g, g)
        for k in range(1, self.levels):
            blocks_by_level[k].append(_space_to_depth(luma_d[k - 1], 2 ** (self.levels - k)))
        if self.in_chans == 3:
            chroma_a, chroma_d = wavedec2(planes[1], self.bank, self.levels - 1)
            if self.levels >= 2:
                coarsest.append(torch.cat([chroma_a.unsqueeze(2), chroma_d[-1]], dim=2))  # (B, 2, 4, g, g)
            else:
                coarsest.append(chroma_a.unsqueeze(2))  # (B, 2, 1, g, g)
            for k in range(2, self.levels):  # chroma level k-1 sits on Y's level-k grid
                blocks_by_level[k].append(_space_to_depth(chroma_d[k - 2], 2 ** (self.levels - k)))
        blocks = [torch.cat([_space_to_depth(c, 1) for c in coarsest], dim=1)]
        blocks += [torch.cat(blocks_by_level[k], dim=1) for k in range(self.levels - 1, 0, -1)]
        w = torch.cat(blocks, dim=1)  # (B, C, g, g)
        return w.flatten(2).transpose(1, 2)  # (B, T, C)

    def reconstruct(self, w: torch.Tensor) -> list[torch.Tensor]:
        """Invert :meth:`pixel_embedding`: returns the Y plane (and the down-sampled CbCr planes)."""
        batch = w.shape[0]
        g = self.grid_size
        grid = w.transpose(1, 2).reshape(batch, self.embed_dim, g, g)
        pieces = list(torch.split(grid, self.block_sizes, dim=1))
        coarse = pieces[0]
        luma_coarse = coarse[:, :4].view(batch, 1, 4, g, g)
        luma_details: list[torch.Tensor] = [torch.empty(0)] * self.levels
        luma_details[self.levels - 1] = luma_coarse[:, :, 1:]
        chroma_details: list[torch.Tensor] = [torch.empty(0)] * max(self.levels - 1, 0)
        for idx, k in enumerate(range(self.levels - 1, 0, -1), start=1):
            factor = 2 ** (self.levels - k)
            block = pieces[idx]
            luma_size = 3 * factor**2
            luma_details[k - 1] = _depth_to_space(block[:, :luma_size], 1, 3, factor)
            if self.in_chans == 3 and k >= 2:
                chroma_details[k - 2] = _depth_to_space(block[:, luma_size:], 2, 3, factor)
        planes = [waverec2(luma_coarse[:, :, 0], luma_details, self.bank)]
        if self.in_chans == 3:
            if self.levels >= 2:
                chroma_coarse = coarse[:, 4:].view(batch, 2, 4, g, g)
                chroma_details[self.levels - 2] = chroma_coarse[:, :, 1:]
                planes.append(waverec2(chroma_coarse[:, :, 0], chroma_details, self.bank))
            else:
                planes.append(coarse[:, 4:])
        return planes

    # -- the non-smooth part ---------------------------------------------------------------------------
    def _approximation_mask(self) -> torch.Tensor:
        """(C,) bool: which entries of a token are coarsest-approximation coefficients."""
        mask = torch.zeros(self.embed_dim, dtype=torch.bool)
        mask[0] = True  # Y's approximation
        if self.in_chans == 3:
            step = 4 if self.levels >= 2 else 1
            mask[4] = mask[4 + step] = True  # Cb's and Cr's approximations
        return mask

    def sparsify(self, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Zero, per image, the smallest-magnitude fraction ``zero_fraction`` of W's entries.

        With ``exempt_approximation`` the coarsest approximation coefficients are always kept and the fraction
        applies to the remaining (detail) entries. Returns ``(w * keep, keep)``; ``keep`` is a constant mask,
        so the gradient through kept entries is exact and zero through dropped ones.
        """
        if self.zero_fraction == 0.0:
            return w, torch.ones_like(w, dtype=torch.bool)
        batch = w.shape[0]
        magnitude = w.detach().abs().reshape(batch, -1)
        exempt = 0
        if self.exempt_approximation:  # approximation entries rank above every detail: never dropped
            magnitude = magnitude.masked_fill(self.approx_mask.repeat(w.shape[1]), float("inf"))
            exempt = self.n_approx
        n_candidates = w.shape[1] * (w.shape[2] - exempt)  # from shapes: no device sync, no graph break
        n_zero = round(self.zero_fraction * n_candidates)
        keep = torch.ones_like(magnitude, dtype=torch.bool)
        if n_zero:
            # Unsorted: the same entries (ties included; torch selects them before it sorts), ~3x faster.
            smallest = magnitude.topk(n_zero, dim=1, largest=False, sorted=False).indices
            keep.scatter_(1, smallest, False)
        keep = keep.view_as(w)
        return w * keep, keep

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        return self.sparsify(self.pixel_embedding(x))[0]

    def smooth_transform(self, x: torch.Tensor) -> torch.Tensor:
        return self.pixel_embedding(x)

    def exact_and_smooth(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One pixel embedding serves both: the smooth map is the embedding, the exact one masks it."""
        w = self.pixel_embedding(x)
        return self.sparsify(w)[0], w

    def extra_repr(self) -> str:
        return (
            f"wavelet={self.wavelet}, levels={self.levels}, in_chans={self.in_chans}, tokens={self.num_tokens}, "
            f"C={self.embed_dim}, blocks={self.block_sizes}, zero_fraction={self.zero_fraction}, "
            f"exempt_approximation={self.exempt_approximation}, level_shift={self.level_shift}"
        )
