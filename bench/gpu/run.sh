#!/usr/bin/env bash
# The GPU benchmark: Parley's executable with its CUDA natives against llama-server on the same
# CUDA kernels (`-ngl 99`), on bench-1b in F16 and Q4_0: B1 (decode, one stream), B8 (aggregate
# decode at 1, 8 and 32 streams), B2/B3 (a 20-turn conversation's time to first token), then the
# correctness check (bench/gpu/check.ts). Run from the repository root with `.gpu/` beside it
# (bun bench/gpu/pack.ts makes it), on the GPU machine:
#     bash bench/gpu/run.sh
# after a first call that carried `.gpu/libggml-cuda.so.xz` there (else the plugin is compiled there),
# or here, as its rehearsal on the CPU (the same steps on bench-small, fewer streams, no GPU:
# the CUDA plugin's build is configured, not compiled):
#     bash bench/gpu/run.sh --cpu
# Writes log.txt, the perf JSON files and check.json into $OUT (the device's) or .bench/gpu-out/.
# The plugin's build stays in .bench/gpu-ggml-build/, so a second call on the same machine goes
# on from where a first one stopped.
set -euo pipefail
cpu=false
[ "${1:-}" = --cpu ] && cpu=true
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$root/.bench/gpu-out}
mkdir -p "$out"
# Unpacked afresh each run, always to the same place: the plugin's build is tied to its source's path.
work=$root/.bench/gpu-work
rm -rf "$work"
mkdir -p "$work"
exec > >(tee "$out/log.txt") 2>&1
SECONDS=0
tar -xJf "$root/.gpu/payload.tar.xz" -C "$work"
echo "unpacked in ${SECONDS} s: $(du -sh "$work" | cut -f1)"
parley=$work/parley
threads=$(nproc)

if ! $cpu; then
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  # The CUDA plugin needs CUDA 13's runtime and cuBLAS, which this machine may keep outside the
  # loader's default paths (the driver's folder, the toolkit's, PyTorch's wheels).
  for dir in /usr/local/nvidia/lib64 /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib \
    /opt/*/.venv/lib/python3*/site-packages/nvidia/cu13/lib /usr/local/lib/python3*/dist-packages/nvidia/cu13/lib; do
    [ -d "$dir" ] && echo "$dir"
  done >/etc/ld.so.conf.d/parley-gpu.conf
  ldconfig
  ldconfig -p | grep -E "libcuda\.so\.1 |libcudart\.so\.13 |libcublas\.so\.13 " || echo "CUDA libraries missing from the loader's cache"
fi

# The CUDA plugin: the one compiled with the natives, carried by an earlier call, or else compiled
# here from the natives' source and options.
carried=$root/.gpu/libggml-cuda.so.xz
build=$root/.bench/gpu-ggml-build
plugin=$build/bin/libggml-cuda.so
if ! $cpu && [ -f "$carried" ]; then
  plugin=$work/libggml-cuda.so
  xz -dc "$carried" >"$plugin"
  echo "the CUDA plugin compiled with the natives, carried: ${SECONDS} s"
else
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  mapfile -t options <"$work/ggml-cuda.options"
  nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc)
  cmake -S "$work/ggml" -B "$build" "${generator[@]}" "${options[@]}" -DCMAKE_CUDA_COMPILER="$nvcc" >"$out/cmake.txt"
  if $cpu; then
    echo "configured the CUDA plugin's build in ${SECONDS} s (not compiled on the CPU rehearsal)"
  else
    cmake --build "$build" --target ggml-cuda -j "$threads"
    echo "compiled the CUDA plugin: ${SECONDS} s"
  fi
fi

# The executable unpacks its natives on its first start; the CUDA build goes beside them, and
# llama-server takes the very same plugin.
natives=$work/natives
PARLEY_NATIVES_DIR=$natives "$parley" --version
unpacked=$(ls -d "$natives"/3.*)
cp -r "$work/natives-cuda" "$unpacked/linux-x64-cuda"
if ! $cpu; then
  cp "$plugin" "$unpacked/linux-x64-cuda/libggml-cuda.so"
  ldd "$unpacked/linux-x64-cuda/libggml-cuda.so" | grep -E "cuda|cublas" || true
  ln -s "$unpacked/linux-x64-cuda/libggml-cuda.so" "$work/llama/libggml-cuda.so"
fi

# Three runs there (medians): B1 is one cold reply a run, and a run takes under a minute on the GPU.
if $cpu; then
  preset=bench-small runs=1 types=f16 streams=1,2 gpu_env=() llama_flags=()
else
  preset=bench-1b runs=3 types="f16 q4_0" streams=1,8,32 gpu_env=(--parley-env PARLEY_GPU=cuda) llama_flags=(--llama-flag=-ngl=99)
fi
for type in $types; do
  # Speculation off: kernel parity, as the CPU rows keep (bench-1b's greedy text repeats itself,
  # which drafts would turn into a speed no real text gets).
  BUN_BE_BUN=1 "$parley" "$work/bench/perf.js" --binary "$parley" --llama-server "$work/llama/llama-server" \
    --preset "$preset" --type "$type" --only B1,B8 --streams "$streams" --runs "$runs" --threads "$threads" \
    --parley-env "PARLEY_NATIVES_DIR=$natives" "${gpu_env[@]}" --parley-env PARLEY_SPECULATE=off "${llama_flags[@]}"
  echo "after $type: ${SECONDS} s"
done
for json in "$work"/.bench/perf-*.json; do cp "$json" "$out/"; done

check_flags=()
$cpu && check_flags=(--cpu)
PARLEY_NATIVES_DIR=$natives BUN_BE_BUN=1 "$parley" "$work/bench/check.js" --binary "$parley" --model "$work/.bench/$preset.gguf" \
  --work "$work" "${check_flags[@]}" | tee "$out/check.json"
echo "done in ${SECONDS} s"
