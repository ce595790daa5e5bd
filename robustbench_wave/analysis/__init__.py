"""Analysis: what the per-example records and the models say about the wavelet tokenizer's robustness claim.

:mod:`.checks` holds the gradient-masking checklist (one registered class per check) and
:mod:`.diagnostics` runs it for a model; :mod:`.energy` measures how much of a perturbation sparsification
removes; :mod:`.verdict` turns the records' numbers into the verdict on the claim of the source paper
(Zhu & Soricut 2024). Everything here reads records and metrics from :mod:`robustbench_wave.evaluation` and
runs attacks only through :mod:`robustbench_wave.attacks`; the report (:mod:`robustbench_wave.reporting`)
renders what it returns.
"""
