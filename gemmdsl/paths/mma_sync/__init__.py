"""The mma_sync instruction path's modules; `path.PATH` is its registered object (gemmdsl/paths)."""
