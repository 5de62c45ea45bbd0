#!/usr/bin/env bash
# The first thing to run on a GPU machine (docs/gpu.md): one short GRPO iteration on Sokoban with each
# rollout backend (transformers, vLLM) on one GPU, and with gradient checkpointing and bf16; then
# data-parallel (DDP, with vLLM too) and sharded (FSDP2, and with CPU offload) under torchrun when there
# are two GPUs or more. Prints, per case, whether it ran, its wall seconds and the
# trainer's own phase times (rollout, MI, update, weight sync) from the run's metrics.jsonl.
#
#   bash benchmarks/speed/gpu_smoke.sh                      # Qwen2.5-0.5B-Instruct, every case this machine can run
#   MODEL=Qwen/Qwen2.5-3B-Instruct GPUS=4 bash benchmarks/speed/gpu_smoke.sh
#
# Needs the GPU install of docs/gpu.md (CUDA torch, vLLM for its case) and the model reachable (hub or path).
# A failing case does not stop the others; the script exits non-zero if any failed. Its output folder is
# OUT (default: a new temporary folder), one run folder per case with its log.
set -uo pipefail

MODEL=${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}
ENV_ID=${ENV_ID:-Ragen/Sokoban-v0}
PYTHON=${PYTHON:-python}
OUT=${OUT:-$(mktemp -d -t ragen-gpu-smoke-XXXX)}
# small on purpose: 2 groups x 4 samples, 2 turns; it checks the machinery, not learning
SHAPE=(--env "$ENV_ID" --model "$MODEL" --iterations 1 --groups 2 --group-size 4 --max-turns 2
       --max-new-tokens 128 --mi-every 1 --save-strategy no)

if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "no CUDA device visible to torch ($PYTHON): install CUDA torch first (docs/gpu.md)" >&2
  exit 2
fi
FOUND=$("$PYTHON" -c "import torch; print(torch.cuda.device_count())")
GPUS=${GPUS:-$FOUND}
"$PYTHON" -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, '|',
  torch.cuda.device_count(), 'x', torch.cuda.get_device_name(0))"
echo "model $MODEL, env $ENV_ID, output $OUT"

failed=0
printf '%-22s %-8s %8s  %s\n' case result wall_s "phases (s, from metrics.jsonl)"

phases() {  # the time/* fields of the run's first metrics record
  "$PYTHON" - "$1/metrics.jsonl" <<'EOF'
import json, sys
try:
    record = json.loads(open(sys.argv[1]).readline())
except (OSError, ValueError):
    print("-")
else:
    print(" ".join(f"{k[5:-2]}={v:.1f}" for k, v in record.items() if k.startswith("time/") and k.endswith("_s")))
EOF
}

run_case() {  # run_case NAME COMMAND...: runs it with its log in OUT/NAME, prints one row
  local name=$1; shift
  local dir="$OUT/$name"
  mkdir -p "$dir"
  local start=$SECONDS
  if "$@" --output-dir "$dir" > "$dir/log.txt" 2>&1; then
    printf '%-22s %-8s %8d  %s\n' "$name" ok $((SECONDS - start)) "$(phases "$dir")"
  else
    printf '%-22s %-8s %8d  %s\n' "$name" FAILED $((SECONDS - start)) "see $dir/log.txt"
    tail -n 5 "$dir/log.txt" | sed 's/^/    /'
    failed=1
  fi
}

run_case transformers-1gpu "$PYTHON" -m ragen_envs.cli train "${SHAPE[@]}" --device cuda
run_case checkpointing-1gpu "$PYTHON" -m ragen_envs.cli train "${SHAPE[@]}" --device cuda \
  --gradient-checkpointing --mixed-precision bf16
VLLM=0
"$PYTHON" -c "import vllm" 2>/dev/null && VLLM=1
if [ "$VLLM" = 1 ]; then  # the engine's defaults: 0.3 of the GPU, asleep during the update
  run_case vllm-1gpu "$PYTHON" -m ragen_envs.cli train "${SHAPE[@]}" --device cuda --backend vllm
else
  printf '%-22s %-8s\n' vllm-1gpu skipped "(vllm is not installed: pip install -e \".[gpu]\")"
fi
if [ "$GPUS" -ge 2 ]; then
  TORCHRUN=("$PYTHON" -m torch.distributed.run --standalone --nproc_per_node "$GPUS" -m ragen_envs.cli train
            "${SHAPE[@]}" --device cuda)
  for mode in ddp fsdp; do
    run_case "$mode-${GPUS}gpu" "${TORCHRUN[@]}" --data-parallel "$mode"
  done
  run_case "fsdp-offload-${GPUS}gpu" "${TORCHRUN[@]}" --data-parallel fsdp --fsdp-cpu-offload
  # an engine per rank, each on its rank's GPU
  [ "$VLLM" = 1 ] && run_case "vllm-ddp-${GPUS}gpu" "${TORCHRUN[@]}" --data-parallel ddp --backend vllm
else
  printf '%-22s %-8s\n' "ddp, fsdp" skipped "(one GPU: they need two or more)"
fi
exit $failed
