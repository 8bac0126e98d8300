#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    loom_wasm::cli::main()
}

// The binary is native-only; this keeps `cargo build --target wasm32-unknown-unknown` of the workspace working.
#[cfg(target_arch = "wasm32")]
fn main() {}
