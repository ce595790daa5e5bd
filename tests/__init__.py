"""The test suite, one package per pipeline stage (docs/architecture.md): ``data``, ``models``, ``training``,
``attacks``, ``evaluation``, ``analysis``, ``reporting``, ``cli`` (the command lines end to end) and
``benchmarks``; project-wide checks (the layering, the ``slow`` marker) sit here, shared helpers in
``support``. Packages, so that the stage folders never shadow the repository's ``models/`` and ``attacks/``
spec folders and test modules are imported by their full name (``tests.evaluation.test_sharding``)."""
