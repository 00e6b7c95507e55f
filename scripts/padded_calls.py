"""Calls a family runs on padded copies of A and B (paths/wgmma/pad.py), for compute-sanitizer: K = 33, 77 and 129
(rows TMA refuses) with A one element into its buffer, each against float64; exits 1 if one is off.

    python3 scripts/padded_calls.py specs/hgemm_h100_bf16c_family.gemmf
"""
import sys

import torch

import gemmdsl

TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 5e-3}  # as tests/test_gpu_shapes16.py


def main(path: str) -> int:
    family = gemmdsl.load(path)
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[family.metadata["dtypes"]["a"]]
    failed = 0
    for m, n, k in [(33, 33, 33), (200, 296, 77), (333, 517, 129)]:
        a = torch.randn(m * k + 1, device="cuda").to(dtype)[1:].view(m, k)
        w = torch.randn(n, k, device="cuda").to(dtype)
        launch = family.bind(a, w.T)
        assert launch.launches[0].function.name.endswith("_pad_operands"), launch.entry
        c = family(a, w.T)
        torch.cuda.synchronize()
        exact = a.double() @ w.double().T
        error = float((c.double() - exact).norm() / exact.norm())
        verdict = "PASS" if error <= TOLERANCE[dtype] else "FAIL"
        failed += verdict == "FAIL"
        print(f"{verdict}  {family.name} {m}x{n}x{k} A+1 on {launch.entry}: relative error {error:.2e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
