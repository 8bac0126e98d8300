// Builds dist/: the wasm-bindgen output from pkg/ (scripts/build-pkg.sh at the repo root) plus the compiled TS, and
// copies the repository's LICENSE next to package.json, where `npm pack` takes it into the tarball.
import { cpSync, existsSync, readdirSync, rmSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const web = fileURLToPath(new URL('..', import.meta.url));
const pkg = `${web}pkg`;
if (!existsSync(`${pkg}/loom_wasm_bg.wasm`)) {
  console.error('web/pkg/ has no wasm build: run scripts/build-pkg.sh first');
  process.exit(1);
}
rmSync(`${web}dist`, { recursive: true, force: true });
// Only the module, its types and the wasm: wasm-pack's package.json/README are not part of this package.
for (const name of readdirSync(pkg)) {
  if (/^loom_wasm(\.js|\.d\.ts|_bg\.wasm)$/.test(name) || name === 'snippets') {
    cpSync(`${pkg}/${name}`, `${web}dist/pkg/${name}`, { recursive: true });
  }
}
cpSync(`${web}../LICENSE`, `${web}LICENSE`);
execFileSync(`${web}node_modules/.bin/tsc`, ['-p', `${web}tsconfig.json`], { stdio: 'inherit' });
