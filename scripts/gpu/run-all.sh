#!/usr/bin/env bash
# Both GPU checks in one go, for a lent machine that gives back at most 8 files of 16 MiB:
#   scripts/gpu/run-all.sh DEST [LIMIT_S]
# runs scripts/gpu-check-torch-fsdp.sh then scripts/gpu-check-engine.sh into /tmp/gpu-checks
# (each stopped at what is left of LIMIT_S, default 510 s, so the packing below always runs),
# then packs that folder into DEST/gpu-checks.tgz.part-aa, -ab, ... (15 MiB each).
set -uo pipefail
DEST=${1:?usage: scripts/gpu/run-all.sh DEST [LIMIT_S]}
LIMIT_S=${2:-510}
HERE=$(cd "$(dirname "$0")/.." && pwd)
WORK=/tmp/gpu-checks
rm -rf "$WORK" && mkdir -p "$WORK" "$DEST"
start=$SECONDS
left() { echo $((LIMIT_S - (SECONDS - start))); }
timeout --signal=INT --kill-after=15 "$(left)" "$HERE/gpu-check-torch-fsdp.sh" "$WORK/torch-fsdp" 2>&1 | tee "$WORK/torch-fsdp.console.log"
echo "gpu-check-torch-fsdp rc=${PIPESTATUS[0]}"
timeout --signal=INT --kill-after=15 "$(left)" "$HERE/gpu-check-engine.sh" "$WORK/engine" 2>&1 | tee "$WORK/engine.console.log"
echo "gpu-check-engine rc=${PIPESTATUS[0]}"
tar -C "$WORK" -czf - . | split -b 15m - "$DEST/gpu-checks.tgz.part-"
ls -la "$DEST"
