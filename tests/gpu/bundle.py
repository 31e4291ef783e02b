"""`make gpu-bundle`: what tests/gpu/check.sh needs on the lent GPU machine, under its 64 MiB.

That machine has Python 3.12, torch (CUDA), Triton, nvcc, grpcio, protobuf, transformers and
numpy, but nothing can be downloaded there. This script prepares, in `.gpu-bundle/` (git-ignored,
carried with the call):

- `flashinfer.tar.xz`: flashinfer-python 0.7.x pruned to its Python code and the sources its
  JIT compiles the fa2 paged kernels from (headers, top-level csrc, CUTLASS/CCCL/spdlog includes);
  the wheel is 101 MB, ~45 MB of it kernel sources for other features.
- `wheels/`: cp312 wheels of what the image lacks or holds at another version than our generated
  stubs need: apache-tvm-ffi (flashinfer's JIT runtime), gguf, protobuf, grpcio,
  grpcio-health-checking.
- `router_core/_router_core.abi3.so`: the Rust extension from `maturin build` (PyO3 abi3, so the
  build made here under Python 3.11 loads under 3.12 there).
- `switchyard_rpc/`: the generated gRPC stubs (git-ignored in the checkout).
- `smollm2/tokenizer.json`: SmolLM2's tokenizer, for engines with random SmolLM2-shaped weights
  (the 98 MB GGUF cannot travel).

Then it checks what it can here: the pruned flashinfer imports and every source file its JIT
would compile for the kernels check.sh uses exists in the bundle, and the bundle plus the
checkout fit the limit.
"""
from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FLASHINFER = "flashinfer-python==0.7.4"
TVM_FFI = "apache-tvm-ffi>=0.1.11,<0.2"
LIMIT_BYTES = 64 << 20
HEADROOM_BYTES = 4 << 20  # the call also carries the checkout's untracked files and metadata
# What the lent machine runs (KINDS.md): pip matches these tags exactly.
DEVICE_TAGS = ["--python-version", "3.12", "--implementation", "cp", "--only-binary=:all:",
               *[arg for tag in ("manylinux_2_17_x86_64", "manylinux2014_x86_64",
                                 "manylinux_2_24_x86_64", "manylinux_2_27_x86_64",
                                 "manylinux_2_28_x86_64") for arg in ("--platform", tag)]]
# Kept from flashinfer/data: header trees the JIT puts on its include path, and csrc's top-level
# files (the paged attention bindings and jinja templates); csrc's sub-folders are other kernels.
_DATA_TREES = ("include/", "cutlass/include/", "cutlass/tools/util/include/", "spdlog/include/",
               "cccl/cub/", "cccl/libcudacxx/include/", "cccl/thrust/")
_KERNEL_SOURCE_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".c", ".cc", ".cpp", ".md")
# The attention kernels check.sh builds: (dtype, head_dim) of SmolLM2 (64) and Llama 3.1 8B (128).
JIT_CONFIGS = (("bfloat16", 64), ("float16", 64), ("bfloat16", 128))


def run(cmd: list[str], **kwargs: object) -> None:
    shown = " ".join(cmd)
    print("+", shown if len(shown) < 300 else shown[:300] + " ...", flush=True)
    subprocess.run(cmd, check=True, **kwargs)  # type: ignore[call-overload]


def download(requirements: list[str], dest: Path, device: bool) -> list[Path]:
    """One wheel per requirement into the empty folder `dest` (pip's own cache makes a rerun
    cheap); for the lent machine's Python and platform when `device`."""
    dest.mkdir(parents=True)
    tags = DEVICE_TAGS if device else ["--only-binary=:all:"]
    run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", *tags, "-d", str(dest),
         *requirements])
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != len(requirements):
        raise SystemExit(f"expected {len(requirements)} wheels, got {[w.name for w in wheels]}")
    return wheels


def keep_flashinfer_file(name: str) -> bool:
    if name.startswith("flashinfer_python-") and name.endswith((".dist-info/METADATA",
                                                                 ".dist-info/WHEEL")):
        return True
    if not name.startswith("flashinfer/") or name.endswith("/"):
        return False
    if name.startswith("flashinfer/data/"):
        rest = name.removeprefix("flashinfer/data/")
        if rest.startswith("csrc/"):
            return "/" not in rest.removeprefix("csrc/")
        return rest.startswith(_DATA_TREES)
    return not name.endswith(_KERNEL_SOURCE_SUFFIXES)


def prune_flashinfer(wheel: Path, out: Path) -> int:
    kept = 0
    with zipfile.ZipFile(wheel) as z, tarfile.open(out, "w:xz", preset=6) as tar:
        for info in z.infolist():
            if not keep_flashinfer_file(info.filename):
                continue
            member = tarfile.TarInfo(info.filename)
            member.size = info.file_size
            member.mode = 0o644
            with z.open(info) as data:
                tar.addfile(member, data)
            kept += 1
    return kept


def build_router_core(out_dir: Path) -> Path:
    """The abi3 extension module out of a release wheel built by maturin."""
    with tempfile.TemporaryDirectory() as tmp:
        maturin = Path(sys.executable).with_name("maturin")
        run([str(maturin), "build", "--release", "-q", "--out", tmp], cwd=REPO,
            env={**os.environ, "PYO3_PYTHON": sys.executable})
        wheels = list(Path(tmp).glob("*.whl"))
        if len(wheels) != 1 or "abi3" not in wheels[0].name:
            raise SystemExit(f"expected one abi3 wheel from maturin, got {wheels}")
        with zipfile.ZipFile(wheels[0]) as z:
            so = [n for n in z.namelist() if n.startswith("router_core/") and n.endswith(".so")]
            if len(so) != 1:
                raise SystemExit(f"no extension module in {wheels[0].name}: {so}")
            target = out_dir / "router_core" / Path(so[0]).name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(z.read(so[0]))
    return target


def write_tokenizer(out_dir: Path) -> None:
    from switchyard_tokenizer.default_model import default_model_path
    from switchyard_tokenizer.tokenizer import EngineTokenizer

    tokenizer = EngineTokenizer.from_gguf(default_model_path())
    target = out_dir / "smollm2" / "tokenizer.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(tokenizer.to_state()["tokenizer_json"], encoding="utf-8")


_VERIFY = r"""
import os, re, sys
from pathlib import Path
import torch
import flashinfer.decode, flashinfer.prefill
from flashinfer.jit import env
from flashinfer.jit.attention import modules
roots = [env.FLASHINFER_INCLUDE_DIR, env.FLASHINFER_CSRC_DIR]
missing, seen = [], set()
def resolve(path, text):
    for name in re.findall(r'#include\s*[<"]((?:flashinfer/)?[\w./-]+)[>"]', text):
        # Trees on the include path wholesale, the CUDA toolkit's and tvm_ffi's own headers, and
        # boost (only under FP16_QK_REDUCTION_SUPPORTED, never defined for these kernels; the
        # upstream wheel does not ship it either).
        if name.startswith(("cute/", "cutlass/", "cub/", "thrust/", "cuda", "tvm/", "dlpack/",
                            "boost/")):
            continue
        for root in [path.parent, *roots]:
            hit = root / name
            if hit.is_file():
                if hit not in seen:
                    seen.add(hit)
                    resolve(hit, hit.read_text(errors="replace"))
                break
        else:
            if "/" in name or name.endswith((".cuh", ".inc")):
                missing.append((str(path), name))
for dtype_name, head_dim in CONFIGS:
    dtype = getattr(torch, dtype_name)
    spec = modules._gen_batch_prefill_primary_module(
        "fa2", dtype, dtype, dtype, torch.int32, head_dim, head_dim, 0, False, False, False)
    for source in spec.sources:
        source = Path(source)
        if not source.is_file():
            missing.append(("spec", str(source)))
        else:
            resolve(source, source.read_text(errors="replace"))
for d in env.CUTLASS_INCLUDE_DIRS + env.CCCL_INCLUDE_DIRS + [env.SPDLOG_INCLUDE_DIR]:
    if not Path(d).is_dir():
        missing.append(("include dir", str(d)))
print("headers resolved:", len(seen))
if missing:
    sys.exit("missing: %r" % missing[:20])
print("flashinfer bundle verified")
"""


def verify_flashinfer(tar_path: Path) -> None:
    """Import the pruned package here (CPU) and check the JIT's sources for JIT_CONFIGS."""
    with tempfile.TemporaryDirectory() as tmp:
        host = download([TVM_FFI, "nvidia-ml-py"], Path(tmp) / "host", device=False)
        site = Path(tmp) / "site"
        run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
             "--target", str(site), *map(str, host)])
        with tarfile.open(tar_path) as tar:
            tar.extractall(site, filter="data")
        code = f"CONFIGS = {JIT_CONFIGS!r}\n{_VERIFY}"
        env = {**os.environ, "PYTHONPATH": str(site), "FLASHINFER_CUDA_ARCH_LIST": "9.0a",
               "FLASHINFER_WORKSPACE_BASE": str(Path(tmp) / "ws")}
        run([sys.executable, "-c", code], env=env, cwd=tmp)


def tracked_bytes() -> int:
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, check=True,
                           capture_output=True).stdout.split(b"\0")
    return sum((REPO / f.decode()).stat().st_size for f in files
               if f and (REPO / f.decode()).is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / ".gpu-bundle"))
    parser.add_argument("--no-verify", action="store_true")
    parser.add_argument("--verify-only", action="store_true", help="check an existing bundle")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.verify_only:
        verify_flashinfer(out / "flashinfer.tar.xz")
        return 0
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)

    with tempfile.TemporaryDirectory() as tmp:
        flashinfer = download([FLASHINFER], Path(tmp) / "flashinfer", device=True)
        files = prune_flashinfer(flashinfer[0], out / "flashinfer.tar.xz")
    print(f"flashinfer: kept {files} files", flush=True)
    pins = [TVM_FFI] + [f"{name}=={md.version(name)}" for name in
                        ("gguf", "protobuf", "grpcio", "grpcio-health-checking")]
    download(pins, out / "wheels", device=True)
    build_router_core(out)
    shutil.copytree(REPO / "switchyard_rpc", out / "switchyard_rpc",
                    ignore=shutil.ignore_patterns("__pycache__"))
    write_tokenizer(out)
    if not args.no_verify:
        verify_flashinfer(out / "flashinfer.tar.xz")

    bundle = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    checkout = tracked_bytes()
    print(f"bundle {bundle / 2**20:.1f} MiB + checkout {checkout / 2**20:.1f} MiB "
          f"(limit {LIMIT_BYTES / 2**20:.0f} MiB per call)")
    for path in sorted(out.rglob("*")):
        if path.is_file() and path.stat().st_size > 1 << 20:
            print(f"  {path.relative_to(out)}: {path.stat().st_size / 2**20:.1f} MiB")
    if bundle + checkout + HEADROOM_BYTES > LIMIT_BYTES:
        print("too large to travel", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
