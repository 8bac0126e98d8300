//! Loom's own conformance corpora: every format check byte for byte, every forward output bit for bit.

use std::path::Path;

use loom_wasm::conformance::{run, CheckKind, Outcome, Report};

/// Runs every check of the corpus in `testdata/<name>` and fails with every failing case listed.
fn run_corpus(name: &str) -> Report {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata").join(name);
    let report = run(&dir, CheckKind::All).unwrap();
    let failures: Vec<_> = report
        .cases
        .iter()
        .filter_map(|(id, o)| match o {
            Outcome::Failed(reason) => Some(format!("{id}: {reason}")),
            _ => None,
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    report
}

#[test]
fn every_format_and_forward_check_of_the_loom_corpus_passes() {
    let report = run_corpus("conformance");
    assert_eq!(report.cases.len(), 422);
    assert_eq!(report.passed(), 422, "{}", report.summary());
}

/// More Loom-written cases (scripts/gen_extra_corpus.py, welvet 0.80.0) with shapes and fields the shared corpus
/// lacks: odd packed sizes, query_dim, rope bases, temperatures, paddings, disabled cells, meta rules, tiny and
/// huge scales, explicit scales, API morph chains, builds, combine modes.
#[test]
fn every_case_of_the_extra_loom_corpus_passes() {
    let report = run_corpus("loom-extra");
    // Every case, counted: one that vanished from the corpus or the report fails here.
    assert_eq!(report.cases.len(), 380, "{}", report.summary());
    assert_eq!(report.passed(), 380, "{}", report.summary());
}

/// The same corpora's forward checks on the GPU (wgpu → Vulkan; Mesa lavapipe in CI) within the stated tolerance.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn forward_on_the_gpu_matches_loom_within_the_tolerance() {
    use loom_wasm::conformance::{run_on, Device};
    let gpu = pollster::block_on(loom_wasm::gpu::Gpu::new()).expect("no wgpu adapter: run scripts/setup.sh");
    let device = Device::Gpu(std::sync::Arc::new(gpu));
    // The forward cases of each corpus, exactly (the others are format-only cases, skipped by a forward check).
    for (name, cases) in [("conformance", 399), ("loom-extra", 372)] {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata").join(name);
        let report = run_on(&dir, CheckKind::Forward, &device).unwrap();
        let failures: Vec<_> = report
            .cases
            .iter()
            .filter_map(|(id, o)| match o {
                Outcome::Failed(reason) => Some(format!("{id}: {reason}")),
                _ => None,
            })
            .collect();
        assert!(failures.is_empty(), "{}", failures.join("\n"));
        assert_eq!(report.passed(), cases, "{name}: {}", report.summary());
        // A layer run on the CPU would pass bit-exact without the GPU checked: no corpus case needs one here.
        assert!(report.cpu_layers.is_empty(), "{name}: {:#?}", report.cpu_layers);
        eprintln!(
            "{name} on the GPU: {}, max error {:?}",
            report.summary(),
            report.max_error
        );
    }
}
