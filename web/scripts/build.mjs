// Builds dist/: the wasm-bindgen output of the three modules (scripts/build-pkg.sh at the repo root) plus the compiled TS, and
// copies the repository's LICENSE next to package.json, where `npm pack` takes it into the tarball.
import { cpSync, existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const web = fileURLToPath(new URL('..', import.meta.url));
// The wasm modules (scripts/build-pkg.sh): their glue, types and .wasm only, not wasm-pack's package.json/README.
const modules = [
  ['pkg', 'loom_wasm'],
  ['pkg-chat', 'loom_chat'],
  ['pkg-grammar', 'loom_grammar'],
];
for (const [dir, name] of modules) {
  if (!existsSync(`${web}${dir}/${name}_bg.wasm`)) {
    console.error(`web/${dir}/ has no wasm build: run scripts/build-pkg.sh first`);
    process.exit(1);
  }
}
rmSync(`${web}dist`, { recursive: true, force: true });
for (const [dir, name] of modules) {
  for (const file of readdirSync(`${web}${dir}`)) {
    if (file === `${name}.js` || file === `${name}.d.ts` || file === `${name}_bg.wasm` || file === 'snippets') {
      cpSync(`${web}${dir}/${file}`, `${web}dist/${dir}/${file}`, { recursive: true });
    }
  }
}
cpSync(`${web}../LICENSE`, `${web}LICENSE`);
// The wasm boundary's types, generated from the Rust types (crate/src/boundary.rs): the public types import them
// from here, not from the glue's .d.ts, which needs a newer `lib` (Symbol.dispose) than an app may have.
mkdirSync(`${web}src/generated`, { recursive: true });
cpSync(`${web}../crate/ts/boundary.ts`, `${web}src/generated/boundary.ts`);
execFileSync(`${web}node_modules/.bin/tsc`, ['-p', `${web}tsconfig.json`], { stdio: 'inherit' });
