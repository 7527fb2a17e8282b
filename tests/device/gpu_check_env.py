"""On the GPU machine: which vLLM requirement the image plus the carried site meets, and which it does not.

    PYTHONPATH=VLLM_SITE python3 tests/device/gpu_check_env.py

Prints torch's and vLLM's versions, the GPU, and every vLLM requirement (markers for this interpreter) with the
version found and whether it satisfies the requirement; exit 0 always (a report, the rows decide).
"""

from __future__ import annotations

import importlib.metadata as md

from packaging.requirements import Requirement
from packaging.version import Version


def main() -> None:
    """Print the report."""
    import torch  # noqa: PLC0415 - the GPU machine's torch; imported only when the report runs

    print(f"torch {torch.__version__} cuda {torch.version.cuda} gpu {torch.cuda.get_device_name(0)}")
    print(f"vllm {md.version('vllm')} from {md.distribution('vllm').locate_file('')}")
    for line in md.requires("vllm") or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            have = md.version(req.name)
        except md.PackageNotFoundError:
            print(f"MISSING  {req}")
            continue
        ok = req.specifier.contains(Version(have.split("+")[0]), prereleases=True)
        if not ok:
            print(f"MISMATCH {req}: found {have}")


if __name__ == "__main__":
    main()
