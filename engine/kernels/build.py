"""Build the fast-mode CPU kernels (csrc/*.cpp) into `engine/kernels/_switchyard_cpu.so`.

Run by `make install` (python -m engine.kernels.build). A plain compiler call against torch's
headers and libraries: no ninja, no pybind, so it takes seconds per file. The code picks
AVX-512 VNNI, AVX2 or portable loops at run time (the best the CPU has; all give the same
bits), so the library is built for the baseline x86-64 ISA and works on any machine.
-ffp-contract=off keeps every float operation the one written (no silent fusing), which the
batch-invariance argument in the sources relies on.
"""
from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCES = sorted((HERE / "csrc").glob("*.cpp"))
TARGET = HERE / "_switchyard_cpu.so"


def _flags() -> tuple[list[str], list[str]]:
    import torch
    from torch.utils.cpp_extension import include_paths, library_paths

    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    compile_flags = ["-O3", "-std=c++20", "-fPIC", "-fopenmp", "-ffp-contract=off",
                     "-fno-math-errno", "-Wall", "-Wno-unused-function", "-Wno-uninitialized",
                     "-Wno-maybe-uninitialized",
                     f"-D_GLIBCXX_USE_CXX11_ABI={abi}", *(f"-I{p}" for p in include_paths())]
    lib_dirs = library_paths()
    link_flags = ["-shared", "-fopenmp", *(f"-L{p}" for p in lib_dirs),
                  *(f"-Wl,-rpath,{p}" for p in lib_dirs), "-lc10", "-ltorch_cpu"]
    return compile_flags, link_flags


def build(verbose: bool = False) -> Path:
    compiler = os.environ.get("CXX", "g++")
    compile_flags, link_flags = _flags()
    objects_dir = HERE / "build"
    objects_dir.mkdir(exist_ok=True)

    def compile_one(src: Path) -> Path:
        obj = objects_dir / (src.stem + ".o")
        cmd = [compiler, *compile_flags, "-c", str(src), "-o", str(obj)]
        if verbose:
            print(" ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        return obj

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        objects = list(pool.map(compile_one, SOURCES))
    tmp = TARGET.with_suffix(".so.tmp")
    subprocess.run([compiler, *map(str, objects), *link_flags, "-o", str(tmp)], check=True)
    tmp.replace(TARGET)  # atomic: a running engine never sees half a library
    return TARGET


if __name__ == "__main__":
    print(f"built {build(verbose='-v' in sys.argv)}")
