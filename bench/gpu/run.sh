#!/usr/bin/env bash
# The GPU benchmark: Parley's executable with its CUDA natives against llama-server on the same
# CUDA kernels (`-ngl 99`), on bench-1b in F16 and Q4_0: B1 (decode, one stream), B8 (aggregate
# decode at 1, 8 and 32 streams), B2/B3 (a 20-turn conversation's time to first token), then the
# correctness check (bench/gpu/check.ts). Run from the repository root with `.gpu/` beside it
# (bun bench/gpu/pack.ts makes it), on the GPU machine:
#     bash bench/gpu/run.sh
# or here, as its rehearsal on the CPU (the same steps on bench-small, fewer streams, no -ngl):
#     bash bench/gpu/run.sh --cpu
# Writes log.txt, the perf JSON files and check.json into $OUT (the device's) or .bench/gpu-out/.
set -euo pipefail
cpu=false
[ "${1:-}" = --cpu ] && cpu=true
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$root/.bench/gpu-out}
mkdir -p "$out"
work=$(mktemp -d /tmp/parley-gpu.XXXXXX)
exec > >(tee "$out/log.txt") 2>&1
SECONDS=0
tar -xJf "$root/.gpu/payload.tar.xz" -C "$work"
echo "unpacked in ${SECONDS} s: $(du -sh "$work" | cut -f1)"
parley=$work/parley
threads=$(nproc)

if $cpu; then
  preset=bench-small types=f16 streams=1,2 gpu_env=() llama_flags=()
else
  preset=bench-1b types="f16 q4_0" streams=1,8,32 gpu_env=(--parley-env PARLEY_GPU=cuda) llama_flags=(--llama-flag=-ngl=99)
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  # The CUDA plugin needs CUDA 13's runtime and cuBLAS, which this machine keeps outside the
  # loader's default paths (the driver's folder, the toolkit's, PyTorch's wheels).
  for dir in /usr/local/nvidia/lib64 /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    /opt/*/.venv/lib/python3*/site-packages/nvidia/cu13/lib /usr/local/lib/python3*/dist-packages/nvidia/cu13/lib; do
    [ -d "$dir" ] && echo "$dir"
  done >/etc/ld.so.conf.d/parley-gpu.conf
  ldconfig
  ldconfig -p | grep -E "libcuda\.so\.1 |libcudart\.so\.13 |libcublas\.so\.13 " || echo "CUDA libraries missing from the loader's cache"
fi

for type in $types; do
  # Speculation off: kernel parity, as the CPU rows keep (bench-1b's greedy text repeats itself,
  # which drafts would turn into a speed no real text gets).
  BUN_BE_BUN=1 "$parley" "$work/bench/perf.js" --binary "$parley" --llama-server "$work/llama/llama-server" \
    --preset "$preset" --type "$type" --only B1,B8 --streams "$streams" --runs 1 --threads "$threads" \
    "${gpu_env[@]}" --parley-env PARLEY_SPECULATE=off "${llama_flags[@]}"
  echo "after $type: ${SECONDS} s"
done
for json in "$work"/.bench/perf-*.json; do cp "$json" "$out/"; done

check_flags=()
$cpu && check_flags=(--cpu)
BUN_BE_BUN=1 "$parley" "$work/bench/check.js" --binary "$parley" --model "$work/.bench/$preset.gguf" --work "$work" "${check_flags[@]}" | tee "$out/check.json"
echo "done in ${SECONDS} s"
