"""Tests of the gallery of broken defences: its table, its commands and one small run end to end."""
