//! The `loom` command-line tool (native only).

/// Entry point of the `loom` binary.
pub fn main() -> std::process::ExitCode {
    std::process::ExitCode::SUCCESS
}
