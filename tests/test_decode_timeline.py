"""scripts/decode_timeline.py's probes go into every shipped decode spec's kernel text (the GPU run is the
script's; docs/performance.md quotes it)."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("decode_timeline", ROOT / "scripts" / "decode_timeline.py")
decode_timeline = importlib.util.module_from_spec(spec)
spec.loader.exec_module(decode_timeline)

DECODE_SPECS = sorted(path.stem for path in (ROOT / "generated").glob("*.json")
                      if "decode" in json.loads(path.read_text()))


def test_there_are_decode_specs():
    assert len(DECODE_SPECS) >= 4


@pytest.mark.parametrize("name", DECODE_SPECS)
def test_probes_go_into_the_kernel(name):
    cuda = decode_timeline.instrumented((ROOT / "generated" / f"{name}.cu").read_text(), name)
    kernel = cuda[cuda.index(f"{name}_kernel("):]
    for probe in ("start_clock = sm_clock()", "staged_clock = sm_clock()", "loop_clock = sm_clock()",
                  "probe[4] = sm_clock()"):
        assert kernel.count(probe) == 1, probe


def test_a_missing_anchor_is_named():
    with pytest.raises(ValueError, match="anchor"):
        decode_timeline.instrumented("namespace x_detail {", "x")
