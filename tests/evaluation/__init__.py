"""Tests of the evaluation: the engine, records and metrics, sharding, saved adversarial examples."""
