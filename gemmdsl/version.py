"""gemmdsl's version, which the emitted files, the metadata and the caches' keys quote; a module of its own so
that the pipeline reads it without importing the package's public face (gemmdsl/__init__.py)."""

__version__ = "0.1.0"
