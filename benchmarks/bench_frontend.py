"""The wavelet front-end (transform + per-image sparsification) vs batched PyWavelets + NumPy on 1,024 images.

The front-end (:class:`robustbench_wave.models.wavelet.WaveletFrontEnd`, as the ``wavelet`` zoo model builds
it: db1, 2 levels, 80% of the coefficients zeroed per image) runs its forward under ``torch.inference_mode``.
The baseline is what a NumPy user writes: ``pywt.wavedec2(..., mode='periodization', axes=(-2, -1))`` over the
whole batch at once (colour: JFIF YCbCr first, the chroma planes 2×2-averaged and decomposed one level less,
as the front-end does), then the same per-image sparsification with ``np.argpartition``. Both keep the same
coefficients, so the kept energy per image must agree; the note gives the largest relative difference.

Run alone: ``python -m benchmarks.bench_frontend [--quick]``.
"""

from __future__ import annotations

import argparse

import numpy as np
import pywt
import torch

from benchmarks.harness import Row, interleaved, ratio_rows, reps_for, run_script
from robustbench_wave.models.wavelet import WaveletFrontEnd

IMG = 32
LEVELS = 2
WAVELET = "db1"
ZERO_FRACTION = 0.8
RGB_TO_YCBCR = np.array([[0.299, 0.587, 0.114], [-0.168736, -0.331264, 0.5], [0.5, -0.418688, -0.081312]])
YCBCR_OFFSET = np.array([0.0, 0.5, 0.5]).reshape(1, 3, 1, 1)


def _flat_coeffs(plane: np.ndarray, levels: int) -> np.ndarray:
    """(B, c, N, N) -> (B, c·N²/…) every coefficient of an L-level periodized DWT, per image."""
    coeffs = pywt.wavedec2(plane, WAVELET, mode="periodization", level=levels, axes=(-2, -1))
    parts = [coeffs[0]] + [band for detail in coeffs[1:] for band in detail]
    return np.concatenate([p.reshape(p.shape[0], -1) for p in parts], axis=1)


def pywt_frontend(x: np.ndarray, zero_fraction: float = ZERO_FRACTION) -> np.ndarray:
    """The front-end in NumPy: level-shifted (YCbCr) planes, batched DWT, per-image top-k sparsification."""
    if x.shape[1] == 1:
        w = _flat_coeffs(x - 0.5, LEVELS)
    else:
        matrix, offset = RGB_TO_YCBCR.astype(x.dtype), YCBCR_OFFSET.astype(x.dtype)
        ycbcr = np.einsum("oc,bchw->bohw", matrix, x) + offset - 0.5
        b, _, n, _ = ycbcr.shape
        chroma = ycbcr[:, 1:].reshape(b, 2, n // 2, 2, n // 2, 2).mean(axis=(3, 5))
        w = np.concatenate([_flat_coeffs(ycbcr[:, :1], LEVELS), _flat_coeffs(chroma, LEVELS - 1)], axis=1)
    n_zero = round(zero_fraction * w.shape[1])
    smallest = np.argpartition(np.abs(w), n_zero - 1, axis=1)[:, :n_zero]
    np.put_along_axis(w, smallest, 0.0, axis=1)
    return w


def kept_energy_gap(torch_out: torch.Tensor, numpy_out: np.ndarray) -> float:
    """Largest relative difference of per-image kept energy (sum of squares) between the two paths."""
    a = torch_out.double().flatten(1).pow(2).sum(1).numpy()
    b = (numpy_out.astype(np.float64) ** 2).sum(1)
    return float(np.max(np.abs(a - b) / np.maximum(b, 1e-12)))


def case_rows(channels: int, n: int, reps: int) -> list[Row]:
    """One image format: the front-end vs PyWavelets on the same ``n`` random images."""
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(n, channels, IMG, IMG, generator=gen)
    x_np = x.numpy()  # float32 on both sides (PyWavelets keeps float32)
    front = WaveletFrontEnd(IMG, channels, levels=LEVELS, wavelet=WAVELET, zero_fraction=ZERO_FRACTION).eval()

    def run_front() -> torch.Tensor:
        with torch.inference_mode():
            return front(x)

    times = interleaved({"pywt_batched": lambda: pywt_frontend(x_np), "frontend": run_front}, reps)
    gap = kept_energy_gap(run_front(), pywt_frontend(x_np))
    label = "gray 1×32×32" if channels == 1 else "colour 3×32×32 (YCbCr)"
    notes = {"frontend": f"kept energy vs PyWavelets: max rel. diff {gap:.1e}"}
    return ratio_rows(
        "frontend", f"{label}, {n} images", times, "pywt_batched", per=n, unit="image", notes=notes
    )


def bench(args: argparse.Namespace) -> list[Row]:
    """Gray and colour images, 1,024 of each (256 with ``--quick``)."""
    reps = reps_for(args)
    n = 256 if args.quick else 1024
    return case_rows(1, n, reps) + case_rows(3, n, reps)


if __name__ == "__main__":
    run_script("frontend", __doc__.splitlines()[0], bench)
