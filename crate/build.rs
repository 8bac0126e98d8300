//! Copies `shaders/*.wgsl` into `OUT_DIR/shaders` without their comments and indentation, for `include_str!`: the
//! WGSL text ships in every build (12 KB of the wasm module gzipped, as written) and the comments are for people.
//! Lines that start with `// @@` are kept: they mark the sections `gpu::ops::matvec` splices.

use std::path::Path;

fn strip(wgsl: &str) -> String {
    let mut out = String::with_capacity(wgsl.len() / 2);
    for line in wgsl.lines() {
        let line = line.trim();
        if line.starts_with("// @@") {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        let code = line.find("//").map_or(line, |i| &line[..i]).trim_end();
        if !code.is_empty() {
            out.push_str(code);
            out.push('\n');
        }
    }
    out
}

fn main() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
    let out = Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("shaders");
    std::fs::create_dir_all(&out).expect("OUT_DIR is writable");
    println!("cargo:rerun-if-changed={}", src.display());
    for entry in std::fs::read_dir(&src).expect("crate/shaders (a link to the repository's shaders/)") {
        let path = entry.expect("a readable directory entry").path();
        if path.extension().is_some_and(|e| e == "wgsl") {
            println!("cargo:rerun-if-changed={}", path.display());
            let text = std::fs::read_to_string(&path).expect("WGSL is UTF-8");
            std::fs::write(out.join(path.file_name().expect("a file name")), strip(&text))
                .expect("OUT_DIR is writable");
        }
    }
}
