#!/usr/bin/env bash
# Packs what the prepared GPU check needs on a bare GPU machine that can fetch nothing and takes at
# most ~43 MB beside this repository's tracked files per call: SmolLM2's Q4_1 GGUF in three parts
# (.xfer/a, .xfer/b, .xfer/c), this machine's node binary (xz), the built TypeScript with its runtime
# packages, the pinned gguf wheel, and the device-side script .xfer/c/go.sh. Add `/.xfer/` to
# .git/info/exclude, then carry one part per call, each call within the machine's warm window:
#   1. carry [.xfer/a]: mkdir -p /tmp/x && cp .xfer/a/q.0 /tmp/x/
#   2. carry [.xfer/b]: cp .xfer/b/q.1 /tmp/x/
#   3. carry [.xfer/c]: bash .xfer/c/go.sh     (imports SmolLM2, runs scripts/gpu-check.sh)
# Extra arguments for the check go in $CHECK_ARGS on the device (e.g. CHECK_ARGS="--skip pytest").
# Needs: models/gguf/SmolLM2-135M-Instruct.Q4_1.gguf (mage fetch-model), npm run build, .venv.
set -euo pipefail

root="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
gguf=models/gguf/SmolLM2-135M-Instruct.Q4_1.gguf
[[ -f "$gguf" ]] || { echo "gpu-bundle: $gguf is missing: run mage fetch-model first" >&2; exit 2; }
[[ -f dist/cli/main.js ]] || { echo "gpu-bundle: dist/ is missing: run npm run build first" >&2; exit 2; }

rm -rf .xfer/a .xfer/b .xfer/c && mkdir -p .xfer/a .xfer/b .xfer/c
grep -qx '/.xfer/' .git/info/exclude 2>/dev/null || echo '/.xfer/' >> .git/info/exclude

xz -T0 -6 -c "$(command -v node)" > .xfer/c/node.xz
runtime=$(node -e 'console.log(Object.keys(require("./package.json").dependencies).map(d => "node_modules/" + d).join(" "))')
# shellcheck disable=SC2086  # one word per package directory
tar --exclude='*.map' --exclude='*.d.ts' -czf .xfer/c/rt.tgz dist $runtime
"${MAGE_PYTHON:-.venv/bin/python}" -m pip download -q --no-deps --only-binary=:all: -d .xfer/c \
  "$(grep -E '^gguf==' python/requirements.txt)"

# Three parts, so that no call's load (the tracked tree, one part, and in .xfer/c the rest) passes
# the 64 MiB a call carries: .xfer/a and .xfer/b take equal halves of what .xfer/c leaves over.
tracked=$(git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
limit=$(( (64 << 20) - tracked - (1 << 20) ))
rest=$(du -cb .xfer/c/* | tail -1 | cut -f1)
size=$(stat -c %s "$gguf")
half=$(( (size - (limit - rest) + 1) / 2 ))
(( half > 0 )) || half=1
(( half <= limit )) || { echo "gpu-bundle: the GGUF does not fit three calls beside $tracked tracked bytes" >&2; exit 2; }
dd if="$gguf" of=.xfer/a/q.0 bs=1M iflag=count_bytes count="$half" status=none
dd if="$gguf" of=.xfer/b/q.1 bs=1M iflag=skip_bytes,count_bytes skip="$half" count="$half" status=none
dd if="$gguf" of=.xfer/c/q.2 bs=1M iflag=skip_bytes skip="$(( 2 * half ))" status=none
sha256sum "$gguf" | cut -d' ' -f1 > .xfer/c/gguf.sha256

cat > .xfer/c/go.sh <<'EOS'
#!/usr/bin/env bash
# Device side: join the GGUF, check its hash, unpack node and the build, import SmolLM2, run the check.
set -uo pipefail
X=/tmp/x; mkdir -p "$X/bin"; cp .xfer/c/* "$X/"
cat "$X/q.0" "$X/q.1" "$X/q.2" > "$X/s.gguf"
[[ "$(sha256sum "$X/s.gguf" | cut -d' ' -f1)" == "$(cat "$X/gguf.sha256")" ]] || { echo "GGUF parts do not join to the fetched file"; exit 3; }
python3 -c "import lzma,shutil;shutil.copyfileobj(lzma.open('$X/node.xz'),open('$X/bin/node','wb'))" && chmod +x "$X/bin/node"
export PATH="$X/bin:$PATH"; node --version || echo "node does not run here"
tar -xzf "$X/rt.tgz" -C .
python3 -m pip install -q --no-index --no-deps --target /tmp/site "$X"/gguf-*.whl
export PYTHONPATH=/tmp/site MAGE_PYTHON=python3
if PYTHONPATH=/tmp/site:python python3 -m mage_learner.import_gguf --gguf "$X/s.gguf" --out models/smollm2-135m-instruct > "$OUT/import.log" 2>&1; then
  model=()
else
  echo "import failed: falling back to --model tiny"; tail -5 "$OUT/import.log"; model=(--model tiny)
fi
nvidia-smi -L
bash scripts/gpu-check.sh "${model[@]}" --out "$OUT/gpu-check.json" --budget "${BUDGET:-420}" ${CHECK_ARGS:-}
EOS
chmod +x .xfer/c/go.sh
for d in a b c; do echo "gpu-bundle: .xfer/$d $(du -cb .xfer/$d/* | tail -1 | cut -f1) bytes (+ $tracked tracked; limit $(( 64 << 20 )))"; done
