#!/usr/bin/env bash
# torch FSDP2 and FSDP1 on one NVIDIA GPU: capture one trace per configuration, then analyse
# each with overlapscope (and HTA where installed). At most ~2 minutes on an H100/H200.
#   scripts/gpu-check-torch-fsdp.sh [OUT]      (default: gpu-check-torch-fsdp-<date>)
# OUT/batch<B>/<config>/rank-0.pt.trace.json.gz, <config>.analyze.txt and .analysis.json
# beside it, OUT/batch<B>/captures.json, OUT/environment.txt, OUT/summary.txt, for global
# batches 16 (host-bound) and 64 (device-bound). Without a GPU it exits 2 at once.
set -uo pipefail
source "$(dirname "$0")/gpu/common.sh"
OUT=${1:-gpu-check-torch-fsdp-$(date -u +%Y%m%d-%H%M)}
gpu_check_begin gpu-check-torch-fsdp "$OUT"

log "capture: torch FSDP2 and FSDP1, world size 1, NCCL (scripts/gpu/torch_fsdp_capture.py)"
small=()
[ "$DEVICE" = cpu ] && small=(--layers 3 --dim 64 --heads 2 --seq-len 32 --vocab 128)
capture_rc=0
# batch 16: the host sets the step (as in many real jobs); batch 64: the device does, so
# what prefetching hides shows
for batch in 16 64; do
  [ "$DEVICE" = cpu ] && [ $batch = 64 ] && batch=8
  limited 200 "$PY" "$REPO/scripts/gpu/torch_fsdp_capture.py" --device "$DEVICE" "${small[@]}" \
    --batch $batch --out "$OUT/batch$batch" 2>"$OUT/capture-batch$batch.log" || capture_rc=1
done
[ $capture_rc -eq 0 ] || log "capture: some configurations failed (see capture-batch*.log)"

log "analyze each trace"
mapfile -t dirs < <(find "$OUT" -mindepth 2 -maxdepth 2 -type d | sort)
analyze_all "${dirs[@]}"
"$PY" "$REPO/scripts/gpu/summarize.py" "$OUT" | tee "$OUT/summary.txt"
log "gpu-check-torch-fsdp done: $OUT"
exit $capture_rc
