#!/usr/bin/env bash
# The demo app: builds what is stale (wasm core, npm package, app) and serves it on localhost. Run
# `bash scripts/setup.sh` once first. PORT=8080 bash scripts/start.sh picks another port (default 4173).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build-www.sh
port=${PORT:-4173}
echo
echo "  Loom inspector: http://127.0.0.1:$port/        (click \"Open the sample decoder\", or drop a file)"
echo "  Chat:           http://127.0.0.1:$port/#chat   (click \"Chat with SmolLM2-135M-Instruct\")"
echo
cd www
exec node_modules/.bin/vite preview --host 127.0.0.1 --port "$port" --strictPort
