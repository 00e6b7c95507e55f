"""Analysis passes over a kernel spec: bank conflicts, registers, occupancy, waves, intensity, the fuse chain.

Each pass lives in its own module and declares the facts it needs and provides;
`PassManager` orders them (see framework.py). `ALL_PASSES` is the set the
`check` command and the compiler's header run.
"""
from .banks import BankConflictPass
from .framework import (DEFAULT_PROBLEM, Context, Pass, PassGraphError, PassManager, PassOutcome, PassResult,
                        ProblemSize)
from .fuse import FusePass
from .intensity import IntensityPass
from .launch import LaunchPass
from .occupancy import OccupancyPass
from .registers import RegisterPass
from .smem_traffic import SmemTrafficPass
from .waves import WavesPass

ALL_PASSES: tuple[Pass, ...] = (
    LaunchPass(), BankConflictPass(), SmemTrafficPass(), RegisterPass(), OccupancyPass(), WavesPass(),
    IntensityPass(), FusePass(),
)

__all__ = [
    "ALL_PASSES", "DEFAULT_PROBLEM", "Context", "Pass", "PassGraphError", "PassManager", "PassOutcome",
    "PassResult", "ProblemSize",
]
