#!/usr/bin/env bash
# Where the GPU waits on its host, on one NVIDIA GPU: torch FSDP2 with one known host cause
# each (a slow DataLoader, a .item() per block, many small units; and a reference), one trace
# each, then overlapscope analyze on each (with HTA where installed). About a minute on an
# H100/H200.
#   scripts/gpu-check-host-causes.sh [OUT]      (default: gpu-check-host-causes-<date>)
# OUT/<config>/rank-0.pt.trace.json.gz, <config>.analyze.txt and .analysis.json beside it,
# OUT/captures.json, OUT/environment.txt, OUT/summary.txt. Without a GPU it exits 2 at once.
set -uo pipefail
source "$(dirname "$0")/gpu/common.sh"
OUT=${1:-gpu-check-host-causes-$(date -u +%Y%m%d-%H%M)}
gpu_check_begin gpu-check-host-causes "$OUT"

log "capture: FSDP2 with a known host cause each (scripts/gpu/torch_fsdp_capture.py)"
small=()
[ "$DEVICE" = cpu ] && small=(--layers 3 --dim 64 --heads 2 --seq-len 32 --vocab 128 --batch 2)
limited 240 "$PY" "$REPO/scripts/gpu/torch_fsdp_capture.py" --device "$DEVICE" "${small[@]}" \
  --only fsdp2-free-running fsdp2-slow-loader fsdp2-item-per-block fsdp2-many-small-units \
  --out "$OUT" 2>"$OUT/capture.log"
capture_rc=$?
[ $capture_rc -eq 0 ] || log "capture: some configurations failed (see capture.log)"

log "analyze each trace"
mapfile -t dirs < <(find "$OUT" -mindepth 1 -maxdepth 1 -type d | sort)
analyze_all "${dirs[@]}"
"$PY" "$REPO/scripts/gpu/summarize.py" "$OUT" | tee "$OUT/summary.txt"
log "gpu-check-host-causes done: $OUT"
exit $capture_rc
