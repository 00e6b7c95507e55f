"""The FP8 wgmma path: e4m3 and e5m2 operands on Hopper's warp-specialized kernel, with promoted accumulation."""
