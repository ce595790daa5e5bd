"""Which data a test may use: Fashion-MNIST where it is installed, else the synthetic stand-in of its shape.

A fresh machine without Debian's ``dataset-fashion-mnist`` (or the files in the data folder) and without
network has no Fashion-MNIST. A test that only needs gray 10-class 32x32 images attacks :data:`GRAY` (the
real data set when it is here, ``synthetic`` otherwise: the same shape, 10 classes); a test about the real
data set itself is marked :data:`needs_fashion_mnist` and skipped, with the reason, when it is absent.
"""

from __future__ import annotations

import pytest

from robustbench_wave.data import DataError, data_dir, fashion_mnist

FASHION_MNIST = fashion_mnist.NAME
GRAY_STAND_IN = "synthetic"  # 10 classes of 1x32x32 images, as padded Fashion-MNIST


def fashion_mnist_installed() -> bool:
    """Every Fashion-MNIST file is on this machine (Debian's folder or the data folder); nothing downloaded."""
    try:
        for spec in fashion_mnist.FILES.values():
            fashion_mnist._locate(spec, data_dir(), allow_download=False)
    except (DataError, ValueError):
        return False
    return True


HAS_FASHION_MNIST = fashion_mnist_installed()
#: The gray data set a test attacks when any 10-class 1x32x32 images do.
GRAY = FASHION_MNIST if HAS_FASHION_MNIST else GRAY_STAND_IN
NO_FASHION_MNIST = (
    "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist, or its four idx .gz files in "
    "$RBW_DATA_DIR/fashion-mnist/)"
)
#: For a test of the real data set (its numbers, its files), which no stand-in can replace.
needs_fashion_mnist = pytest.mark.skipif(not HAS_FASHION_MNIST, reason=NO_FASHION_MNIST)
