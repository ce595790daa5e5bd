"""Models with known answers and tiny data sets shared by the tests (imported as ``tests.support``).

:data:`REPO` is the repository root, whatever folder a test module sits in: the spec folders, and the
``PYTHONPATH`` of the command lines a test runs as processes."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
