#!/usr/bin/env bash
# overlapscope's engine on one NVIDIA GPU: parity, no device sync on the communication path,
# instrumentation overhead, and four profiled runs analysed with overlapscope (and HTA where
# installed). At most ~4 minutes on an H100/H200.
#   scripts/gpu-check-engine.sh [OUT]      (default: gpu-check-engine-<date>)
# Runs (OUT/runs/):
#   nccl-1rank-{none,backward_pre}   world size 1, NCCL, bf16, global batch 8 (host-bound)
#   nccl-1rank-b32-{none,backward_pre}  the same at global batch 32 (device-bound)
#   nccl-1rank-offload               the same, backward_pre with --cpu-offload and
#                                    --checkpoint-units all (the offload copy stream)
#   gloo-2rank-{none,backward_pre}   2 ranks sharing the GPU, collectives over gloo staged
#                                    through pinned host memory, behind the lab's shaped link
#                                    (LINK_GBIT, default 5) where network namespaces work,
#                                    else over the loopback (environment.txt says which)
# Without a GPU it exits 2 at once.
set -uo pipefail
source "$(dirname "$0")/gpu/common.sh"
OUT=${1:-gpu-check-engine-$(date -u +%Y%m%d-%H%M)}
LINK_GBIT=${LINK_GBIT:-5}
gpu_check_begin gpu-check-engine "$OUT"
mkdir -p "$OUT/checks" "$OUT/runs"
status=0

model=(--model gpt --layers 8 --dim 1024 --heads 16 --seq-len 1024 --vocab 8192
  --steps 6 --profile-wait 2 --profile-warmup 1 --profile-active 2)
bf16=(--mixed-precision bf16)
small=()
if [ "$DEVICE" = cpu ]; then  # rehearsal (common.sh)
  small=(--layers 2 --dim 64 --heads 2 --seq-len 32 --vocab 128 --batch 4 8 --rounds 2 --steps 3)
  model=(--model gpt --layers 2 --dim 64 --heads 2 --seq-len 32 --vocab 128 --steps 6
    --profile-wait 2 --profile-warmup 1 --profile-active 2)
  bf16=()
fi

log "parity and sync checks (world size 1, NCCL on CUDA)"
limited 150 "$PY" "$REPO/scripts/gpu/engine_checks.py" parity --device "$DEVICE" --out "$OUT/checks" >"$OUT/checks/parity.log" 2>&1 || status=1
grep -E "parity|sync" "$OUT/checks/parity.log" | grep -v " ok$" | head -20
log "instrumentation overhead (instrumented vs --no-instrument, alternated)"
limited 150 "$PY" "$REPO/scripts/gpu/engine_checks.py" overhead --device "$DEVICE" "${small[@]}" --out "$OUT/checks" >"$OUT/checks/overhead.log" 2>&1 || status=1
grep "overhead" "$OUT/checks/overhead.log"

# run NAME WHAT FLAGS...: one profiled `overlapscope run` into $OUT/runs/NAME, with torch
# flagging every synchronisation in forward and backward (the run's logs name them)
run() {
  local name=$1 what=$2
  shift 2
  log "run $name ($what)"
  OVERLAPSCOPE_SYNC_DEBUG=warn limited 150 "$PY" -m overlapscope run --device "$DEVICE" \
    "${model[@]}" "$@" --out "$OUT/runs/$name" >"$OUT/runs/$name.log" 2>&1 || status=1
  tail -3 "$OUT/runs/$name.log"
}

for policy in none backward_pre; do
  run "nccl-1rank-$policy" "bf16, world size 1" --nproc 1 --global-batch 8 "${bf16[@]}" \
    --policy "$policy"
done
for policy in none backward_pre; do
  run "nccl-1rank-b32-$policy" "bf16, world size 1, global batch 32: the device sets the step" \
    --nproc 1 --global-batch 32 "${bf16[@]}" --policy "$policy"
done
run nccl-1rank-offload "bf16, backward_pre, --cpu-offload, --checkpoint-units all" --nproc 1 \
  --global-batch 8 "${bf16[@]}" --policy backward_pre --cpu-offload --checkpoint-units all

link=()
if lab_error=$("$PY" -c 'from overlapscope.lab.netns import check_lab_available as c; c()' 2>&1); then
  link=(--link-gbit "$LINK_GBIT")
  echo "2-rank runs: behind the lab's link shaped to $LINK_GBIT Gbit/s" | tee -a "$OUT/environment.txt"
else
  echo "2-rank runs: over the loopback, unshaped (the lab cannot run here: ${lab_error##*$'\n'})" | tee -a "$OUT/environment.txt"
fi
for policy in none backward_pre; do
  run "gloo-2rank-$policy" "fp32, 2 ranks on one GPU, staged through host memory" --nproc 2 \
    --backend gloo "${link[@]}" --global-batch 32 --policy "$policy"
done

log "analyze each run"
mapfile -t dirs < <(find "$OUT/runs" -mindepth 1 -maxdepth 1 -type d -not -name '*.failed*' | sort)
analyze_all "${dirs[@]}"
"$PY" "$REPO/scripts/gpu/summarize.py" "$OUT" | tee "$OUT/summary.txt"
log "gpu-check-engine done: $OUT"
exit $status
