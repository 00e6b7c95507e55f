"""The dequantizing decode path: int4/int8/FP8 (or 16-bit) weights streamed from global memory, converted in
registers and multiplied with mma.sync m16n8k16 with the roles swapped (C^T = W X^T)."""
