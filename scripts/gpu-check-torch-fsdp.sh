#!/usr/bin/env bash
# torch FSDP2 and FSDP1 on one NVIDIA GPU: capture one trace per configuration, then analyse
# each with overlapscope (and HTA where installed). At most ~2 minutes on an H100/H200.
#   scripts/gpu-check-torch-fsdp.sh [OUT]      (default: gpu-check-torch-fsdp-<date>)
# OUT/<config>/rank-0.pt.trace.json.gz, OUT/<config>.analyze.txt and .analysis.json,
# OUT/captures.json, OUT/environment.txt, OUT/summary.txt. Without a GPU it exits 2 at once.
set -uo pipefail
source "$(dirname "$0")/gpu/common.sh"
OUT=${1:-gpu-check-torch-fsdp-$(date -u +%Y%m%d-%H%M)}
gpu_check_begin gpu-check-torch-fsdp "$OUT"

log "capture: torch FSDP2 and FSDP1, world size 1, NCCL (scripts/gpu/torch_fsdp_capture.py)"
small=()
[ "$DEVICE" = cpu ] && small=(--layers 3 --dim 64 --heads 2 --seq-len 32 --vocab 128 --batch 4)
limited 200 "$PY" "$REPO/scripts/gpu/torch_fsdp_capture.py" --device "$DEVICE" "${small[@]}" --out "$OUT" \
  2>"$OUT/capture.log"
capture_rc=$?
[ $capture_rc -eq 0 ] || { log "capture: some configurations failed (rc=$capture_rc)"; tail -5 "$OUT/capture.log"; }

log "analyze each trace"
mapfile -t dirs < <(find "$OUT" -mindepth 1 -maxdepth 1 -type d | sort)
analyze_all "${dirs[@]}"
"$PY" "$REPO/scripts/gpu/summarize.py" "$OUT" | tee "$OUT/summary.txt"
log "gpu-check-torch-fsdp done: $OUT"
exit $capture_rc
