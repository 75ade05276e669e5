#!/usr/bin/env bash
# Checks that `tensorboard --logdir` serves a run's curves: starts TensorBoard on loopback, prints
# the runs and scalar tags it serves, screenshots the scalars page in headless Chromium, stops it.
#
#   scripts/tensorboard-screenshot.sh LOGDIR [OUT.png]     (needs .venv and a `chromium` binary)
set -euo pipefail
root="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)"
logdir="${1:?usage: scripts/tensorboard-screenshot.sh LOGDIR [OUT.png]}"
out="${2:-tensorboard.png}"
port="${TB_PORT:-6123}"
"$root/.venv/bin/tensorboard" --logdir "$logdir" --host 127.0.0.1 --port "$port" >"$out.log" 2>&1 &
tb=$!
trap 'kill $tb' EXIT
for _ in $(seq 60); do curl -sf "http://127.0.0.1:$port/data/runs" >/dev/null && break; sleep 0.5; done
echo "runs: $(curl -s "http://127.0.0.1:$port/data/runs")"
echo "scalar tags per run: $(curl -s "http://127.0.0.1:$port/data/plugin/scalars/tags" |
  python3 -c 'import json,sys; print({r: len(t) for r, t in json.load(sys.stdin).items()})')"
timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1500,900 \
  --virtual-time-budget=20000 --screenshot="$out" \
  "http://127.0.0.1:$port/#scalars&tagFilter=train%2F(loss%7Csuccess%403%7Cenv_reward%7Ckl)%24&_smoothingWeight=0" 2>/dev/null
echo "screenshot: $out"
