"""Training: one shared recipe for every zoo model, with checkpoints that resume bit-identically.

This package owns the recipe and the epoch loop (:mod:`.engine`), training one model for one seed with
resume and reuse (:mod:`.runner`, configured by a :class:`~.runner.TrainConfig`), the checkpoint files
(:mod:`.checkpoint`: safetensors + JSON, verified when read), the summary table (:mod:`.summary`) and
training on several torchrun ranks, DDP or one run per rank (:mod:`.parallel`).
The command line is :mod:`robustbench_wave.train`.
"""
