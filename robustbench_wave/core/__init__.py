"""The foundations every layer stands on, importing nothing else of the package.

:mod:`.io` atomic writes and provenance, :mod:`.naming` the names a user types (did-you-mean, the one
enum parser), :mod:`.distributed` the device and torch.distributed, :mod:`.runfolder` safe names, containment
and the run-folder lock, :mod:`.tracking` optional TensorBoard copies of a run's files, and :mod:`.cli` what
the command lines share (a one-line-error parser, count types, logging set-up). See docs/architecture.md.
"""
