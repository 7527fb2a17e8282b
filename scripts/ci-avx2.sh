#!/usr/bin/env bash
# Opt-in: the tests that depend on the host's ISA, run as on an x86 host with AVX2 only (no AVX-512, no AMX),
# whatever CPU this is. qemu-user (Debian: apt-get install qemu-user) runs this checkout's Python and the vLLM
# engine's under an emulated Haswell: CPUID is emulated, so torch, vLLM's CPU build and dspark all see AVX2 only
# (/proc/cpuinfo stays the host's, which is why dspark reads CPUID). Every process those interpreters spawn
# through sys.executable is emulated too. Some 10x slower than native (docs/testing.md has the figures).
#
# usage: scripts/ci-avx2.sh [PYTEST ARGS...]   (default: the ISA-dependent tests below)
# needs: an x86-64 Linux host, qemu-x86_64 7.2+ (AVX2 in TCG), the engines of scripts/install-engines.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(uname -m)" = x86_64 ] || { echo "ci-avx2: an x86-64 host is needed (qemu-user emulates x86 here)" >&2; exit 2; }
command -v qemu-x86_64 >/dev/null || { echo "ci-avx2: qemu-x86_64 is missing: apt-get install -y qemu-user" >&2; exit 2; }
engines=${DSPARK_ENGINES_DIR:-$PWD/.engines}
[ -x "$engines/vllm/bin/python" ] || { echo "ci-avx2: $engines/vllm is missing: run scripts/install-engines.sh" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Haswell without TSX; TCG lacks tsc-deadline, invpcid, pcid and x2apic, which qemu would warn about at each start.
cpu=Haswell-noTSX,-tsc-deadline,-invpcid,-pcid,-x2apic
read_python='import os, sys, sysconfig
venv = sys.prefix != sys.base_prefix
system = venv and "include-system-site-packages = true" in open(os.path.join(sys.prefix, "pyvenv.cfg")).read()
print(os.path.realpath(sys.executable), sysconfig.get_paths()["purelib"], "%d.%d" % sys.version_info[:2],
      str(system).lower())'

# wrap DIR PYTHON [MODULE SCRIPT]: DIR becomes a virtualenv of PYTHON's packages whose bin/python runs PYTHON's
# interpreter under qemu with argv[0] = itself, so sys.executable, and every child started from it, is emulated
# too; bin/SCRIPT runs `python -m MODULE` there (a console script's shebang would name the real interpreter).
wrap() {
  local dir=$1 base purelib version system
  read -r base purelib version system < <("$2" -c "$read_python")
  mkdir -p "$dir/bin" "$dir/lib/python$version"
  ln -s "$purelib" "$dir/lib/python$version/site-packages"
  printf 'home = %s\ninclude-system-site-packages = %s\nversion = %s\n' "$(dirname "$base")" "$system" "$version" \
    >"$dir/pyvenv.cfg"
  printf '#!/bin/sh\nexec qemu-x86_64 -cpu %s -0 "$0" %s "$@"\n' "$cpu" "$base" >"$dir/bin/python"
  ln -s python "$dir/bin/python3"
  if [ $# -eq 4 ]; then
    printf '#!/bin/sh\nexec "$(dirname "$0")/python" -m %s "$@"\n' "$3" >"$dir/bin/$4"
  fi
  chmod +x "$dir"/bin/*
}

wrap "$work/py" "${PYTHON:-python3}" dspark dspark
mkdir "$work/engines"
for engine in "$engines"/*/; do
  name=$(basename "$engine")
  case $name in
    vllm*) wrap "$work/engines/$name" "$engine/bin/python" vllm.entrypoints.cli.main vllm ;;
    *) wrap "$work/engines/$name" "$engine/bin/python" ;;
  esac
done
export PATH="$work/py/bin:$PATH" DSPARK_ENGINES_DIR="$work/engines" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
# The engine tests' start-up limits (tests/real_engines/vllm_harness.py) and pytest's per-test limit, stretched.
export ENGINE_TEST_TIME_SCALE=${ENGINE_TEST_TIME_SCALE:-10}

# What each layer sees on the emulated CPU, beside the host's /proc/cpuinfo.
host=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -x -E 'avx2|avx512f|avx512_bf16|amx_tile' | tr '\n' ' ' || true)
echo "ci-avx2: the host's /proc/cpuinfo: ${host}"
seen=$(python -c 'from dspark.hardware.select import read_cpu_flags; print(*read_cpu_flags())')
echo "ci-avx2: dspark on qemu -cpu $cpu: [${seen}]"
"$work/engines/vllm/bin/python" -c 'import torch; c = torch.cpu
print("ci-avx2: the engine'"'"'s torch there:", torch.backends.cpu.get_cpu_capability(), "avx512",
      c._is_avx512_supported(), "amx_tile", c._is_amx_tile_supported())'
case " $seen " in *" avx512f "* | *" amx_tile "*)
  echo "ci-avx2: this qemu shows AVX-512 or AMX: there is no AVX2-only CPU to test on" >&2; exit 2 ;;
esac

if [ $# -eq 0 ]; then
  set -- tests/hardware/test_cpuid.py tests/hardware/test_resolve_hardware.py tests/commands/test_cpu_host.py \
    tests/test_doc_commands.py tests/test_docs.py tests/real_engines/test_fp8_cpu_start.py \
    tests/real_engines/test_vllm_dsv4_planner.py::test_the_cpu_build_starts_a_tiny_deepseek_v4_and_prints_dsparks_line
fi
start=$(date +%s)
python -m pytest -q -p no:cacheprovider --timeout "$((900 * ENGINE_TEST_TIME_SCALE))" "$@"
echo "ci-avx2: $(($(date +%s) - start)) s on the emulated AVX2-only CPU"
