"""Build the vLLM bundle for the GPU machine (run HERE, where pip reaches a package index; not collected by pytest).

The H200 image (Python 3.12, torch 2.11.0+cu130, no network) has no vLLM. vLLM 0.25.0 is the release whose wheel
pins exactly the image's torch (torch==2.11.0, CUDA 13 kernels), so it is the one that runs there. This script:

1. walks vLLM 0.25.0's requirements (markers evaluated for CPython 3.12 on Linux x86_64), skipping every package
   the image already has at a version that satisfies the requirement (the image's `pip list`, recorded by
   `gpu_install.sh` into its output and kept in tests/device/h200-image-packages.txt), and the GPU kernel
   libraries these runs do not load (SKIP, each with its reason);
2. downloads each remaining package with `pip download --no-deps` for that platform (PINS override a few);
3. packs the wheels into one tar (with --xz-preset, uncompressed copies xz-compressed: about 25% smaller, minutes
   of CPU) and splits it into parts under the device tool's per-call limit, with SHA-256 sums;
4. writes manifest.json: every requirement met, its decision (carried / image / skipped) and why.

    python tests/device/gpu_bundle.py --out /work/main/.gpu/bundle

Carry the parts one per device call (`gpu_install.sh` there reassembles, checks and installs them).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

HERE = Path(__file__).resolve().parent
ROOT = "vllm==0.25.0"
PLATFORMS = ("manylinux_2_39_x86_64", "manylinux_2_35_x86_64", "manylinux_2_34_x86_64", "manylinux_2_31_x86_64",
             "manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64", "linux_x86_64")
# Kernel libraries vLLM 0.25.0 imports lazily and these runs do not need (each is large; the device tool carries
# 64 MiB a call). FlashInfer's sampler is turned off on the device (VLLM_USE_FLASHINFER_SAMPLER=0).
SKIP = {
    "torch": "the image's 2.11.0+cu130 is vLLM 0.25.0's pin",
    "torchvision": "image (0.26.0 = the pin)",
    "torchaudio": "image (2.11.0 = the pin)",
    "triton": "image (comes with torch)",
    "flashinfer-python": "FlashInfer backends/sampler not used (VLLM_USE_FLASHINFER_SAMPLER=0)",
    "flashinfer-cubin": "FlashInfer not carried",
    "tilelang": "kernels for other architectures (DeepSeek-V3.2 sparse attention)",
    "nvidia-cutlass-dsl": "CuTe DSL kernels, not on these paths",
    "quack-kernels": "CuTe DSL kernels, not on these paths",
    "tokenspeed-mla": "MLA kernels for Blackwell",
    "humming-kernels": "quantised GEMM kernels, not on these paths",
    "pynvvideocodec": "video decoding (multimodal input)",
    "torchcodec": "video/audio decoding (multimodal input)",
    "fastsafetensors": "--load-format fastsafetensors only (runs use dummy weights)",
    "nvidia-cudnn-frontend": "cuDNN attention frontend, not on these paths",
    "deep-gemm": "FP8 block GEMM (no FP8 weights here)",
    "fastapi-cloud-cli": "fastapi[standard]'s cloud deployment CLI, never imported by vLLM",
}
# The image's own version wins even where a requirement asks for another: its transformers needs
# huggingface-hub < 2, and the rest are the image's CUDA stack.
KEEP_IMAGE = {"huggingface-hub", "numpy", "numba", "llvmlite", "setuptools", "transformers", "tokenizers",
              "safetensors", "protobuf", "pillow", "opencv-python-headless"}
# xgrammar >= 0.2.7 needs a newer apache-tvm-ffi than vLLM 0.25.0 pins (0.1.9); 0.2.6 imports with it.
PINS = {"xgrammar": "==0.2.6"}


def marker_env(extras: frozenset[str]) -> list[dict[str, str]]:
    """Marker environments of CPython 3.12 on Linux x86_64, one per requested extra (or none)."""
    base = dict(default_environment())
    base.update(python_version="3.12", python_full_version="3.12.3", sys_platform="linux", platform_system="Linux",
                platform_machine="x86_64", implementation_name="cpython", platform_python_implementation="CPython",
                os_name="posix")
    return [dict(base, extra=e) for e in sorted(extras)] or [dict(base, extra="")]


def requirements_of(wheel: Path, extras: frozenset[str]) -> list[Requirement]:
    """The Requires-Dist lines of a wheel that apply to the target (base requirements plus the given extras)."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    out: list[Requirement] = []
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is None or any(req.marker.evaluate(env) for env in marker_env(extras)):
            out.append(req)
    return out


def read_image(path: Path) -> dict[str, str | None]:
    """The image's packages: `name==version` lines (a recorded freeze) or bare names (version unknown)."""
    out: dict[str, str | None] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, version = line.partition("==")
        out[canonicalize_name(name.split(" @ ")[0])] = version or None
    return out


def already(spec: str, dest: Path) -> Path | None:
    """A wheel in dest that meets the requirement (an earlier run's download), newest first."""
    req = Requirement(spec)
    name = canonicalize_name(req.name)
    hits = [p for p in dest.glob("*.whl") if canonicalize_name(parse_wheel_filename(p.name)[0]) == name
            and req.specifier.contains(parse_wheel_filename(p.name)[1], prereleases=True)]
    return max(hits, key=lambda p: parse_wheel_filename(p.name)[1]) if hits else None


def download(spec: str, dest: Path) -> Path:
    """pip download --no-deps one requirement for the target platform (unless dest has it); the wheel's path."""
    have = already(spec, dest)
    if have is not None:
        return have
    before = set(dest.glob("*.whl"))
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
           "3.12", "--implementation", "cp", "--abi", "cp312", "--abi", "abi3", "--abi", "none", "-d", str(dest)]
    for plat in PLATFORMS:
        cmd += ["--platform", plat]
    cmd += ["--platform", "any", spec]
    subprocess.run(cmd, check=True)
    new = set(dest.glob("*.whl")) - before
    if not new:
        raise SystemExit(f"pip download {spec}: no wheel appeared in {dest}")
    return new.pop()


def resolve(image: dict[str, str | None], dest: Path) -> tuple[dict[str, Path], list[dict[str, str]]]:
    """Walk the requirements from ROOT: wheels to carry by name, and every decision made."""
    carried: dict[str, Path] = {}
    extras_done: dict[str, set[str]] = {}
    decisions: list[dict[str, str]] = []
    queue: list[tuple[Requirement, str]] = [(Requirement(ROOT), "")]
    while queue:
        req, parent = queue.pop(0)
        name = canonicalize_name(req.name)
        row = {"name": name, "requirement": str(req), "from": parent}
        if name in SKIP:
            decisions.append(dict(row, decision="skipped", why=SKIP[name]))
            continue
        if name in image and name not in carried:
            have = image[name]
            ok = have is None or req.specifier.contains(Version(have.split("+")[0]), prereleases=True)
            if ok or name in KEEP_IMAGE:
                why = f"image has {have or 'it (version unknown)'}" + ("" if ok else ", kept: KEEP_IMAGE")
                decisions.append(dict(row, decision="image", why=why))
                continue
        if name in carried:
            version = parse_wheel_filename(carried[name].name)[1]
            if not req.specifier.contains(version, prereleases=True) and name not in PINS:
                print(f"warning: {name} {version} carried, but {parent} asks {req}", file=sys.stderr)
            new_extras = set(req.extras) - extras_done[name]
            if not new_extras:
                continue
            extras_done[name] |= new_extras
            queue += [(r, name) for r in requirements_of(carried[name], frozenset(new_extras))
                      if r.marker is not None and "extra" in str(r.marker)]
            continue
        spec = name + (PINS.get(name) or str(req.specifier))
        wheel = download(spec, dest)
        carried[name] = wheel
        extras_done[name] = set(req.extras)
        decisions.append(dict(row, decision="carried", why=wheel.name))
        print(f"  {wheel.name}  (for {parent or 'root'})", file=sys.stderr)
        queue += [(r, name) for r in requirements_of(wheel, frozenset(req.extras))]
    return carried, decisions


def pack(wheels: list[Path], out: Path, part_bytes: int, preset: int | None) -> dict[str, object]:
    """The wheels in one tar (xz-compressed with a preset), split into parts; sums and sizes."""
    archive = out / "bundle.tar"
    with tarfile.open(archive, "w") as tar:
        for wheel in sorted(wheels):
            if preset is None:
                tar.add(wheel, arcname=f"wheels/{wheel.name}")
                continue
            # Stored (uncompressed) copies: xz packs the shared objects far tighter than the wheels' deflate.
            stored = out / wheel.name
            with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(stored, "w", zipfile.ZIP_STORED) as dst:
                for info in src.infolist():
                    data = src.read(info)  # before the copy's compression changes
                    entry = copy.copy(info)
                    entry.compress_type = zipfile.ZIP_STORED
                    dst.writestr(entry, data)
            tar.add(stored, arcname=f"wheels/{wheel.name}")
            stored.unlink()
    if preset is not None:
        # xz itself, all cores, multi-block (Python's lzma reads it back there): minutes on a small machine.
        plain, archive = archive, out / "bundle.tar.xz"
        with archive.open("wb") as fh:
            subprocess.run(["xz", "-T0", f"-{preset}", "-c", str(plain)], stdout=fh, check=True)
        plain.unlink()
    data = archive.read_bytes()
    parts_dir = out / "parts"
    parts_dir.mkdir(exist_ok=True)
    for old in parts_dir.glob("bundle.part*"):
        old.unlink()
    parts = []
    for i in range(0, len(data), part_bytes):
        part = parts_dir / f"bundle.part{i // part_bytes:02d}"
        part.write_bytes(data[i:i + part_bytes])
        parts.append(part)
    sums = [f"{hashlib.sha256(data).hexdigest()}  bundle.tar"]
    sums += [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.name}" for p in parts]
    (parts_dir / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    archive.unlink()
    return {"archive_bytes": len(data), "parts": [p.name for p in parts]}


def main() -> int:
    """Resolve, download, pack; print the parts to carry."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="an ignored folder (e.g. .gpu/bundle)")
    ap.add_argument("--image-packages", type=Path, default=HERE / "h200-image-packages.txt")
    ap.add_argument("--part-mib", type=float, default=48.0,
                    help="part size in MiB (the tracked tree, about 8 MiB, travels with each part under 64 MiB)")
    ap.add_argument("--xz-preset", type=int, default=None,
                    help="compress with xz at this preset (about 25%% smaller at 6, but minutes of CPU here); "
                         "default: the wheels as they are")
    args = ap.parse_args()
    image = read_image(args.image_packages)
    dl = args.out / "wheels"
    dl.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    carried, decisions = resolve(image, dl)
    for stale in set(dl.glob("*.whl")) - set(carried.values()):
        stale.unlink()
    packed = pack(list(carried.values()), args.out, int(args.part_mib * (1 << 20)), args.xz_preset)
    manifest = {"root": ROOT, "image_packages": str(args.image_packages), "decisions": decisions,
                "wheel_bytes": sum(p.stat().st_size for p in carried.values()), **packed,
                "seconds": round(time.monotonic() - t0, 1)}
    (args.out / "parts" / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(json.dumps({k: v for k, v in manifest.items() if k != "decisions"}, indent=1))
    print(f"{len(carried)} wheels carried; parts in {args.out / 'parts'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
