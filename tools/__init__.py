"""This repository's own tooling, not shipped in the wheel (pyproject's package discovery names only
robustbench_wave): :mod:`.published`, :mod:`.citations` and ``python -m tools.docs``, which keep the summary
files of the documented runs under ``results/published/`` and render and check the README's and docs/'s
numbers from them.
"""
