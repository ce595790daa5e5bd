"""Models with known answers and tiny data sets shared by the tests (imported as ``tests.support``)."""
