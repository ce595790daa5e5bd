"""Tests of the attacks: the registry, the runners against oracles, suites, families and their traits."""
