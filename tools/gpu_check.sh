#!/usr/bin/env bash
# The GPU check: run from the repository root, on a machine with a GPU and no network.
#   bash tools/gpu_check.sh --device cuda --out DIR     (about 8 minutes on one H100)
#   bash tools/gpu_check.sh --device cpu --out DIR      (micro size, seconds: what CI runs)
# Options: --size paper|micro (default: paper on cuda, micro on cpu), --budget SECONDS (470).
# What the machine lacks comes from .whl/ (fill it with `make gpu-wheels` where the package
# registry is reachable): installed with --no-index --no-deps into a scratch folder placed after
# the source tree on PYTHONPATH, so the package itself always runs from this tree. It writes
# DIR/gpu_check.json, DIR/gpu_check.md (rewritten after every stage), DIR/loss_curve.csv,
# DIR/gpu_check.log, and DIR/gpu_ms_per_iter.json and DIR/ensemble_k.json (the committed rows with
# this run's measured ones added, ready to replace posrnn_cli/measure/'s and posrnn_cli/sweep/'s). PYTHON picks the interpreter (default python3), WHEELS the wheel folder (.whl).
set -uo pipefail
OUT=gpu-check
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) [ $# -ge 2 ] || { echo "error: --out needs a folder" >&2; exit 2; }; OUT=$2; shift 2 ;;
    --out=*) OUT=${1#--out=}; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
[ -f pyproject.toml ] && [ -d posrnn_cli ] || { echo "error: run from the repository root (bash tools/gpu_check.sh)" >&2; exit 2; }
PY=${PYTHON:-python3}
# the options first, before anything is written: a short --budget, an --out through a link or over files of another's
PYTHONPATH=$PWD "$PY" -m posrnn_cli.measure.gpu_check --out "$OUT" "${args[@]}" --check-args || exit 2
mkdir -p "$OUT" || exit 2
export PYTHONUNBUFFERED=1
SRC=$PWD
PYPATH=$SRC
shopt -s nullglob
WHEELS=${WHEELS:-.whl}
wheels=("$WHEELS"/*.whl)
if [ ${#wheels[@]} -gt 0 ]; then
  SITE=$(mktemp -d /tmp/posrnn-gpu-site.XXXXXX)
  "$PY" -m pip install -q --no-index --no-deps --target "$SITE" "${wheels[@]}" 2>&1 | tee -a "$OUT/gpu_check.log" \
    || { echo "error: installing $WHEELS/ failed (see above); rebuild it with make gpu-wheels for this Python" >&2; exit 1; }
  PYPATH=$SRC:$SITE
  echo "installed ${#wheels[@]} wheel(s) from $WHEELS/ into $SITE" | tee -a "$OUT/gpu_check.log"
fi
export PYTHONPATH=$PYPATH${PYTHONPATH:+:$PYTHONPATH}
"$PY" -m posrnn_cli.measure.gpu_check --out "$OUT" --out-checked "${args[@]}" 2>&1 | tee -a "$OUT/gpu_check.log"
