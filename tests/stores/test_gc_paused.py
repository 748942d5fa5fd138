"""A load pauses the cyclic collector and hands it back as it found it."""

from __future__ import annotations

import gc

from tether.stores.codec import gc_paused


def test_a_collector_the_caller_disabled_stays_disabled() -> None:
    was = gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            assert not gc.isenabled()
            garbage = [[] for _ in range(20_000)]
        assert not gc.isenabled()
        del garbage
    finally:
        if was:
            gc.enable()


def test_the_collector_resumes_after_a_long_read_and_its_young_objects_are_aged() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        kept = [[] for _ in range(20_000)]  # a long journal's worth of tracked objects
    assert gc.isenabled()
    assert gc.get_count()[0] < 10 * gc.get_threshold()[0]  # collected once, not left for two scans
    assert len(kept) == 20_000


def test_threshold_zero_means_no_collection_here_either() -> None:
    threshold = gc.get_threshold()
    gc.set_threshold(0)
    try:
        with gc_paused():
            kept = [[] for _ in range(20_000)]
        assert gc.get_count()[0] >= 20_000  # nothing collected them
        assert len(kept) == 20_000
    finally:
        gc.set_threshold(*threshold)
