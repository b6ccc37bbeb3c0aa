"""Fixtures of the CUDA back end's tests: fresh random numbers each run, and emulated runs
(:mod:`emulator`) in the test's temporary directory, skipped where g++ is missing."""

import numpy as np
import pytest

import emulator


@pytest.fixture
def rng():
    return np.random.default_rng()


@pytest.fixture
def compare(tmp_path, rng):
    """``compare(flow, inputs_by_func, tolerance, **options)``: :func:`emulator.compare` in
    this test's directory with its random numbers."""
    emulator.require_gxx()

    def check(flow, inputs_by_func, tolerance, **options):
        return emulator.compare(flow, inputs_by_func, tmp_path, tolerance, rng=rng, **options)
    return check
