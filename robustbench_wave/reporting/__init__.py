"""Reporting: everything a reader sees, rendered from a saved run folder without re-running an attack.

:mod:`.runs` names the files of a run folder and reads one (:func:`load_run`), after :mod:`.completeness`
has checked that its records are complete, unedited and of its configuration; :mod:`.tables` lays the
numbers of :mod:`robustbench_wave.evaluation.metrics` out as CSV, LaTeX, terminal text and Markdown tables;
:mod:`.plots` draws the figures; :mod:`.markdown` writes ``report.md``, one function per section. Nothing
here runs an attack or a model's forward pass: the checklist's subset attacks and the energy PGD run in
:mod:`robustbench_wave.attackrun.measure`, which leaves their files for this layer to render
(``tests/test_architecture.py`` holds the rule). The layer sits on top of ``evaluation`` and ``analysis``;
``attackrun`` and the command lines import it.
"""
