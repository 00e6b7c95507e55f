"""Per-GPU profiles: the rates the cycle model counts in, measured on one GPU model by `gemmdsl calibrate`
(gemmdsl/calibrate.py) and shipped in gemmdsl/profiles/NAME.json.

    profile_for(90)            # $GEMMDSL_GPU's profile, else the target's reference GPU's (REFERENCE_PROFILES)
    profile_for(90, "h100_sxm")
    load_profile("my_gpu.json")

A profile holds what was measured in absolute units (TB/s, ns, multiply-adds per SM clock) and the clock the
cycle model's figures turn into times at (`clock_mhz`: the tensor cores' clock under load); the per-clock figures
the model reads (HBM and L2 bytes per clock, a launch in cycles) are derived from them at that clock. Terms the
model fits on timed kernels rather than microbenchmarks (the TMA ring's round trip, 3xTF32's split wait) sit in
its `fitted` section, with their source.

Which profile a compile reads is chosen once per process: $GEMMDSL_GPU (a name from gemmdsl/profiles/ or a
file), else the target architecture's reference GPU. A GPU with no profile of its own (an H100 PCIe, say) is
priced as the reference GPU of its architecture: the H200 for sm_90, the figures measured here. Architectures
with no profile (sm_80, sm_86, sm_89) keep targets.py's datasheet rates.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Mapping

from .errors import GemmdslError

PROFILES_DIR = Path(__file__).with_name("profiles")
PROFILE_ENV = "GEMMDSL_GPU"
REFERENCE_PROFILES: dict[int, str] = {90: "h200"}  # the GPU each architecture's figures are priced on


class ProfileError(GemmdslError, ValueError):
    """A profile that does not exist or does not read."""


@dataclass(frozen=True)
class GpuProfile:
    name: str
    gpu: str  # the name the driver reports
    sm: int
    sms: int
    clock_mhz: int
    hbm_tbps: float
    l2_tbps: float
    launch_ns: int
    mma_sync_macs_per_clock: Mapping[str, int]
    wgmma_macs_per_clock: Mapping[str, int]
    ring_round_trip_cycles: int
    split_wait_cycles_per_k_tile: int
    stream_k_fixup_bytes_per_clock: int
    call_latency_ns: int
    l2_block_bytes_per_clock: int
    hbm_round_trip_cycles: int
    pad_call_ns: int
    pad_copy_gbps: int
    # A checked mma.sync member's k-tile cycles, in percent of its vector kernel's, where a packed operand's leading
    # dimension is off 16 bytes and it runs its narrower kernels (cp.async of 4 or 8 bytes), by element size; and
    # 16-bit operands of odd leading dimension, where its scalar kernel loads one element at a time
    narrow_k_tile_percent_16bit: int
    narrow_k_tile_percent_32bit: int
    scalar_k_tile_percent_16bit: int
    scalar_k_tile_cycles_16bit: int  # ... and the scalar kernel's least k-tile: its loads' round trip
    # A k-tile's round trip through a cp.async ring (the mma.sync members), with every SM streaming: their memory
    # floor's Little's law, and a tile's first k-tile
    cp_async_round_trip_cycles: int
    cp_async_l2_percent: int  # ... and the share of L2's rate (TMA's) their 16-byte copies draw
    # The dequantizing decode kernel (paths/dequant): SM cycles per warp k-step (16 rows of W by 16 of K) with
    # 2 blocks of 8 warps resident, by the weights' bits (4, or 8 for int8 and e4m3) and the rows of A a block
    # takes (8, 16, 32)
    decode_step_cycles_4bit_8rows: int
    decode_step_cycles_4bit_16rows: int
    decode_step_cycles_4bit_32rows: int
    decode_step_cycles_8bit_8rows: int
    decode_step_cycles_8bit_16rows: int
    decode_step_cycles_8bit_32rows: int
    # The bytes of C's stores an SM moves through L2 a clock, counted as whole 32-byte sectors however few of
    # their bytes the lanes write (cost_model.c_store_sectors): the FMA path's epilogue
    c_store_bytes_per_clock: int
    # The bytes of C a wgmma block's consumer warpgroup writes a clock where TMA cannot store C (a row at a time
    # through shared memory, paths/wgmma/store.py and stmatrix.py)
    row_store_bytes_per_clock: int
    # The bytes of C a wgmma block writes a clock straight from its accumulators (a spec without `store: tma`) where
    # C's rows are off 16 bytes, per SM whatever its consumers (paths/wgmma/epilogue.py)
    direct_store_bytes_per_clock: int
    # An FMA block's wait for its k-tile's global loads with a single-stage pipeline, per k-tile (cost_model.py)
    single_stage_wait_cycles: int
    # The GEMV path (paths/gemv): a block's step at least one round trip of its lanes' loads, which it waits out
    # before the next; and the round trip of the memory floor's Little's law over the bytes its blocks keep in flight
    gemv_step_cycles: int
    gemv_round_trip_cycles: int
    # The share of HBM's datasheet rate, in percent, that the wgmma members' TMA k-tiles stream at: rows of 128 bytes
    # a k-tile, whatever the element type (the memory floor's rate for them)
    tma_hbm_percent: int
    # The GEMV path: the share of an SM's even part of HBM's rate, in percent, that its blocks draw (the memory floor
    # bounds the whole call); and the tensor kernel's (`gemv_m16n8k16`) windowed k-tile (rows off 16 bytes: every
    # chunk read as two), in percent of its aligned kernel's
    gemv_draw_percent: int
    gemv_tensor_window_percent: int
    # ... and the share of HBM's datasheet rate, in percent, that the tensor kernel's loads stream at (64 bytes of each
    # row a load, where the CUDA-core kernel's read 512): its memory floor's rate
    gemv_tensor_hbm_percent: int
    source: str

    def _per_clock(self, tbps: float) -> float:
        return tbps * 1e12 / (self.clock_mhz * 1e6)

    @property
    def hbm_bytes_per_clock(self) -> int:
        return round(self._per_clock(self.hbm_tbps))

    @property
    def l2_bytes_per_clock_per_sm(self) -> int:
        return round(self._per_clock(self.l2_tbps) / self.sms)

    @property
    def launch_cycles(self) -> int:
        return round(self.launch_ns * self.clock_mhz / 1e3)

    @property
    def call_cycles(self) -> int:
        return round(self.call_latency_ns * self.clock_mhz / 1e3)

    @property
    def pad_call_cycles(self) -> int:
        return round(self.pad_call_ns * self.clock_mhz / 1e3)

    @property
    def pad_bytes_per_clock(self) -> int:
        return round(self.pad_copy_gbps * 1e9 / (self.clock_mhz * 1e6))


def profile_names() -> list[str]:
    return sorted(path.stem for path in PROFILES_DIR.glob("*.json"))


def _path_of(name: str) -> Path:
    if name.endswith(".json") or os.sep in name:
        return Path(name)
    path = PROFILES_DIR / f"{name}.json"
    if not path.exists():
        raise ProfileError(f"no GPU profile named {name!r} (shipped: {', '.join(profile_names())}; or a "
                           f"PROFILE.json that `gemmdsl calibrate -o` wrote)")
    return path


FITTED = ("ring_round_trip_cycles", "split_wait_cycles_per_k_tile", "stream_k_fixup_bytes_per_clock",
          "call_latency_ns", "l2_block_bytes_per_clock", "hbm_round_trip_cycles", "pad_call_ns", "pad_copy_gbps",
          "narrow_k_tile_percent_16bit", "narrow_k_tile_percent_32bit", "scalar_k_tile_percent_16bit",
          "scalar_k_tile_cycles_16bit", "cp_async_round_trip_cycles",
          "cp_async_l2_percent", "decode_step_cycles_4bit_8rows", "decode_step_cycles_4bit_16rows",
          "decode_step_cycles_4bit_32rows", "decode_step_cycles_8bit_8rows", "decode_step_cycles_8bit_16rows",
          "decode_step_cycles_8bit_32rows", "c_store_bytes_per_clock", "row_store_bytes_per_clock",
          "direct_store_bytes_per_clock", "single_stage_wait_cycles", "gemv_step_cycles", "gemv_round_trip_cycles",
          "tma_hbm_percent", "gemv_draw_percent", "gemv_tensor_window_percent",
          "gemv_tensor_hbm_percent")


@cache
def load_profile(name: str) -> GpuProfile:
    """The profile `name` (a shipped one's name, or a file). Fitted terms a profile lacks (one `gemmdsl calibrate -o`
    wrote has none) are its architecture's reference GPU's."""
    path = _path_of(name)
    try:
        data = json.loads(path.read_text())
        sm = int(data["sm"])
        fitted = dict(data.get("fitted", {}))
        missing = [key for key in FITTED if key not in fitted]
        if missing:
            reference = REFERENCE_PROFILES.get(sm)
            if reference is None or path.resolve() == _path_of(reference).resolve():
                raise KeyError(f"fitted.{missing[0]}")
            fitted.update({key: getattr(load_profile(reference), key) for key in missing})
        return GpuProfile(
            name=path.stem, gpu=data["gpu"], sm=sm, sms=int(data["sms"]), clock_mhz=int(data["clock_mhz"]),
            hbm_tbps=float(data["hbm_tbps"]), l2_tbps=float(data["l2_tbps"]), launch_ns=int(data["launch_ns"]),
            mma_sync_macs_per_clock=dict(data["mma_sync_macs_per_clock"]),
            wgmma_macs_per_clock=dict(data.get("wgmma_macs_per_clock", {})),
            **{key: int(fitted[key]) for key in FITTED}, source=str(data.get("source", "")))
    except ProfileError:
        raise
    except OSError as err:
        raise ProfileError(f"{path}: cannot read the GPU profile: {err.strerror}") from None
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise ProfileError(f"{path}: not a GPU profile ({type(err).__name__}: {err}); `gemmdsl calibrate -o "
                           f"{path.name}` writes one") from None


def profile_for(sm: int, name: str | None = None) -> GpuProfile | None:
    """The profile a compile for `sm` prices with: `name`, else $GEMMDSL_GPU, else the architecture's reference GPU;
    None for an architecture with no profile. A named profile of another architecture is refused."""
    chosen = name or os.environ.get(PROFILE_ENV) or REFERENCE_PROFILES.get(sm)
    if chosen is None:
        return None
    profile = load_profile(chosen)
    if profile.sm != sm:
        if name is None and chosen == os.environ.get(PROFILE_ENV):
            return load_profile(REFERENCE_PROFILES[sm]) if sm in REFERENCE_PROFILES else None
        raise ProfileError(f"GPU profile {chosen!r} is for sm_{profile.sm}, not sm_{sm}")
    return profile
