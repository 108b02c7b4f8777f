# Shared by scripts/gpu-check-*.sh (sourced). Needs bash.
#   gpu_check_begin NAME OUT   fail early without a GPU; set up Python; write OUT/environment.txt
#   log MESSAGE                a timestamped progress line
#   analyze_all DIR...         overlapscope analyze (with HTA where installed) on each, in parallel

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PY=${PYTHON:-python3}
T0=$SECONDS

log() { echo "[$(date -u +%H:%M:%S) +$((SECONDS - T0))s] $*"; }

# limited SECONDS CMD...: CMD, interrupted (SIGINT, then SIGKILL) if it runs longer, so one
# hung step cannot use up a lent machine's time
limited() { timeout --signal=INT --kill-after=10 "$@"; }

# GPU_CHECK_REHEARSE=1: run every step on the CPU with a tiny model (to test the script itself
# where there is no GPU; nothing it prints measures a GPU). DEVICE is what the steps run on.
DEVICE=cuda
[ "${GPU_CHECK_REHEARSE:-0}" = 1 ] && DEVICE=cpu

gpu_check_begin() {
  local name=$1 out=$2
  if [ "$DEVICE" = cuda ] && ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "$name: no NVIDIA GPU here (nvidia-smi is not on PATH); run it on a machine with one NVIDIA GPU" >&2
    exit 2
  fi
  if [ "$DEVICE" = cuda ] && ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
    echo "$name: $PY has no CUDA torch (torch.cuda.is_available() is False); set PYTHON to a Python whose torch sees the GPU" >&2
    exit 2
  fi
  # Wheels carried to a machine that reaches no registry (.whl/): a private site folder that
  # comes first, so the analysis runs on the same pandas as the suite.
  if [ "$DEVICE" = cuda ] && compgen -G "$REPO/.whl/*.whl" >/dev/null; then
    local want
    want=$(ls "$REPO"/.whl/*.whl | xargs -n1 basename | sha256sum | cut -c1-16)
    if [ "$(cat /tmp/overlapscope-site/.wheels 2>/dev/null)" != "$want" ]; then
      "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/overlapscope-site "$REPO"/.whl/*.whl || { echo "$name: installing $REPO/.whl failed" >&2; exit 2; }
      echo "$want" >/tmp/overlapscope-site/.wheels
    fi
    export PYTHONPATH=/tmp/overlapscope-site:$REPO${PYTHONPATH:+:$PYTHONPATH}
  else
    export PYTHONPATH=$REPO${PYTHONPATH:+:$PYTHONPATH}
  fi
  # iproute2 carried for the lab where the machine has none (.ipr/, scripts/gpu/README.md)
  if ! command -v ip >/dev/null 2>&1 && [ -x "$REPO/.ipr/bin/ip" ]; then
    export PATH=$REPO/.ipr/bin:$PATH
  fi
  export PYTHONUNBUFFERED=1
  mkdir -p "$out"
  {
    echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "overlapscope commit: $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$REPO" diff --quiet 2>/dev/null || echo ' (with local changes)')"
    if [ "$DEVICE" = cuda ]; then
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/gpu: /'
    else
      echo "gpu: none (GPU_CHECK_REHEARSE=1: a rehearsal on the CPU; nothing here measures a GPU)"
    fi
    "$PY" - <<'PYEOF'
import platform, torch
print("python:", platform.python_version())
print("torch:", torch.__version__, "cuda:", torch.version.cuda)
if torch.cuda.is_available():
    print("nccl:", ".".join(map(str, torch.cuda.nccl.version())))
print("kernel:", platform.release())
PYEOF
  } >"$out/environment.txt" 2>&1
  log "$name: $(grep -m1 '^gpu:' "$out/environment.txt"), $(grep -m1 '^torch:' "$out/environment.txt")"
}

analyze_all() {
  local dir pids=()
  for dir in "$@"; do
    (
      hta=()
      "$PY" -c 'import hta' >/dev/null 2>&1 && hta=(--hta)
      limited 240 "$PY" -m overlapscope analyze "$dir" "${hta[@]}" --no-progress --json "$dir.analysis.json" \
        >"$dir.analyze.txt" 2>&1
      echo "rc=$?" >>"$dir.analyze.txt"
    ) &
    pids+=($!)
  done
  wait "${pids[@]}"
}
