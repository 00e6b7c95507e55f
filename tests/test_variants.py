"""scripts/variants/transforms.py, the README's experiment variants, still apply to what gemmdsl emits."""
import importlib.util
from pathlib import Path

import pytest

from gemmdsl.compiler import compile_path

ROOT = Path(__file__).resolve().parent.parent
SPEC = importlib.util.spec_from_file_location("transforms", ROOT / "scripts" / "variants" / "transforms.py")
transforms = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(transforms)


@pytest.mark.parametrize("name", sorted(transforms.TRANSFORMS))
def test_every_text_transform_changes_the_kernel_it_is_meant_for(name):
    spec = "sgemm_h100" if name == "sku1" else "sgemm_v3"
    cuda = compile_path(ROOT / "specs" / f"{spec}.gemm").cuda
    assert transforms.TRANSFORMS[name](cuda) != cuda


@pytest.mark.parametrize("patch", ["H", "W"])
def test_codegen_patches_change_the_register_pipeline(patch):
    plain = compile_path(ROOT / "specs" / "sgemm_v3.gemm").cuda
    with transforms.codegen_patch([patch]):
        patched = compile_path(ROOT / "specs" / "sgemm_v3.gemm").cuda
    assert patched != plain
    assert compile_path(ROOT / "specs" / "sgemm_v3.gemm").cuda == plain  # undone afterwards
