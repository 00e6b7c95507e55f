"""The fuse chain's ops, one module each (docs/fusion.md, "Adding an op"); `base` says what an op is.

Importing the package registers the shipped ops; an op from elsewhere registers itself with `register`.
"""
from __future__ import annotations

from . import activation, bias, residual, scale  # noqa: F401 - each registers its op
from .base import BETA_ORDER, FuseStep, Operand, Work, op, ops, register, unregister

__all__ = ["BETA_ORDER", "FuseStep", "Operand", "Work", "op", "ops", "register", "unregister"]
