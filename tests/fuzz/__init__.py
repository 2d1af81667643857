"""Tests of the fuzzing harnesses: the regression corpus replayed, a short fuzz run per harness."""
