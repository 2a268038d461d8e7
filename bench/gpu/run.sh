#!/usr/bin/env bash
# The GPU benchmark: Parley's executable with its CUDA natives against llama-server on the same
# CUDA kernels (`-ngl 99`), on bench-1b in F16 and Q4_0, in this order:
#   1. check: the correctness check (bench/gpu/check.ts): Parley's greedy replies through its native
#      chat API, eight at once in native runs of steps, against llama-server's greedy tokens, the
#      first difference of each stream told with both sides' log-probabilities;
#   2. per file type, `bun run bench perf --only B1,B8 --streams 1,8,32 --rounds 5` twice:
#      kernel parity (speculation off, greedy, both sides), then fresh text (sampled replies, Parley
#      at its defaults: speculation `auto`, prompt ends `auto`; llama-server at its own).
# Run from the repository root with `.gpu/` beside it (bun bench/gpu/pack.ts makes it), on the GPU
# machine:
#     bash bench/gpu/run.sh
# after a first call that carried `.gpu/libggml-cuda.so.xz` there (else the plugin is compiled there,
# which takes most of a session: then run `--parts check,kernel-parity`). Options:
#     --parts check,kernel-parity,fresh-text   what to run (default all three, in that order)
#     --types f16,q4_0                         the file types (default both)
#     --rounds N                               perf's paired rounds per level (default 5; 2 with --cpu)
#     --cpu                                    the rehearsal on a CPU: bench-small, streams 1 and 2,
#                                              the CUDA plugin's build configured, not compiled
#     --local                                  with --cpu: this checkout's dist/parley (`bun run build`),
#                                              .bench/llama.cpp-build's llama-server and the scripts
#                                              run by Bun from source, instead of the payload
# Writes log.txt, the perf JSON files and check.json into $OUT (the device's) or .bench/gpu-out/,
# each perf file as soon as it is written, so a run cut short still returns what it finished.
# The plugin's build stays in .bench/gpu-ggml-build/, so a second call on the same machine goes
# on from where a first one stopped.
set -euo pipefail
cpu=false local=false parts="check kernel-parity fresh-text" types="f16 q4_0" rounds=""
while [ $# -gt 0 ]; do
  case $1 in
    --cpu) cpu=true ;;
    --local) local=true ;;
    --parts) parts=${2//,/ } && shift ;;
    --types) types=${2//,/ } && shift ;;
    --rounds) rounds=$2 && shift ;;
    *) echo "run.sh: unknown option $1 (see the header)" >&2 && exit 2 ;;
  esac
  shift
done
if $local && ! $cpu; then
  echo "run.sh: --local needs --cpu (this checkout's executable has no CUDA natives)" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${OUT:-$root/.bench/gpu-out}
mkdir -p "$out"
# Unpacked afresh each run, always to the same place: the plugin's build is tied to its source's path.
work=$root/.bench/gpu-work
rm -rf "$work"
mkdir -p "$work"
exec > >(tee "$out/log.txt") 2>&1
SECONDS=0
threads=$(nproc)
# What this run wrote, told from earlier runs' files in the same folder.
started=$work/started
touch "$started"

if $local; then
  parley=$root/dist/parley llama=$root/.bench/llama.cpp-build/bin/llama-server results=$root/.bench
  for file in "$parley" "$llama"; do
    [ -x "$file" ] || { echo "run.sh: $file is missing (bun run build; bun run bench perf builds llama-server)" && exit 2; }
  done
  perf=(bun "$root/bench/perf.ts") check=(bun "$root/bench/gpu/check.ts") natives_env=()
else
  tar -xJf "$root/.gpu/payload.tar.xz" -C "$work"
  echo "unpacked in ${SECONDS} s: $(du -sh "$work" | cut -f1)"
  # The commits the result files record, which that machine cannot read for itself (pack.ts).
  set -a
  . "$work/provenance.env"
  set +a
  parley=$work/parley llama=$work/llama/llama-server results=$work/.bench
  perf=(env BUN_BE_BUN=1 "$parley" "$work/bench/perf.js") check=(env BUN_BE_BUN=1 "$parley" "$work/bench/check.js")
fi

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

if ! $local; then
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
  export PARLEY_NATIVES_DIR=$natives
  natives_env=(--parley-env "PARLEY_NATIVES_DIR=$natives")
fi

if $cpu; then
  preset=bench-small streams=1,2 rounds=${rounds:-2} gpu_env=() llama_flags=() check_flags=(--cpu)
else
  preset=bench-1b streams=1,8,32 rounds=${rounds:-5} gpu_env=(--parley-env PARLEY_GPU=cuda) llama_flags=(--llama-flag=-ngl=99) check_flags=()
fi
type_flags=()
for type in $types; do type_flags+=(--type "$type"); done

for part in $parts; do
  case $part in
    check)
      "${check[@]}" --binary "$parley" --llama-server "$llama" --preset "$preset" "${type_flags[@]}" --models "$results" \
        --work "$work" "${check_flags[@]}" | tee "$out/check.json"
      echo "after the check: ${SECONDS} s"
      ;;
    kernel-parity | fresh-text) ;;
    *) echo "run.sh: unknown part $part" && exit 2 ;;
  esac
done
for type in $types; do
  for part in $parts; do
    [ "$part" = check ] && continue
    # The workload sets each side's speculation and sampling (bench/perf/workload.ts).
    "${perf[@]}" --binary "$parley" --llama-server "$llama" --preset "$preset" --type "$type" --workload "$part" \
      --only B1,B8 --streams "$streams" --rounds "$rounds" --threads "$threads" \
      "${natives_env[@]}" "${gpu_env[@]}" "${llama_flags[@]}"
    find "$results" -maxdepth 1 -name 'perf-*.json' -newer "$started" -exec cp {} "$out/" \;
    echo "after $type $part: ${SECONDS} s"
  done
done
echo "done in ${SECONDS} s"
