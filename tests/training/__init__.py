"""Tests of training: the recipe and runner, checkpoints, several ranks, fine-tuning."""
