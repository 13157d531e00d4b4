"""The interpreter settings a broker process runs with (`telemq serve` applies them)."""

from __future__ import annotations

import gc
import sys

from telemq.broker import tune_interpreter
from telemq.broker.tuning import GC_THRESHOLDS, SWITCH_INTERVAL


def test_tune_interpreter_sets_collector_thresholds_freeze_and_switch_interval() -> None:
    thresholds = gc.get_threshold()
    interval = sys.getswitchinterval()
    try:
        tune_interpreter()
        assert gc.get_threshold() == GC_THRESHOLDS
        assert abs(sys.getswitchinterval() - SWITCH_INTERVAL) < 1e-9
        assert gc.get_freeze_count() > 0  # what was loaded is out of the collector's way
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
        sys.setswitchinterval(interval)
