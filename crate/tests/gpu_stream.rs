//! `GpuStream`: networks built on the GPU from a `.entity` header and then its blobs, one at a time (natively through
//! wgpu → Vulkan, Mesa lavapipe). On Loom's corpora a streamed network gives exactly the output of `GpuModel` on the
//! fully read file (the same kernels on the same packed weights), and Loom's own output within the conformance
//! tolerance where Loom's `.entity` reload keeps it; the host keeps no weights once they are on the GPU; hostile
//! or wrong blobs are the same typed errors `entity::read` gives.
#![cfg(not(target_arch = "wasm32"))]

mod gpu_util;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use gpu_util::{close, exact};
use loom_wasm::conformance::{hex_f32s, GPU_TOLERANCE};
use loom_wasm::formats::entity;
use loom_wasm::gpu::{Gpu, GpuModel, GpuStream};
use loom_wasm::LoomError;
use serde_json::Value;

fn gpu() -> Arc<Gpu> {
    static GPU: OnceLock<Arc<Gpu>> = OnceLock::new();
    GPU.get_or_init(|| Arc::new(gpu_util::gpu())).clone()
}

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata")
}

/// Starts a stream from the file's header only.
fn begin(file: &[u8]) -> loom_wasm::Result<GpuStream> {
    let header = entity::read_header(file)?;
    GpuStream::begin(gpu(), &file[..header.payload_offset() as usize], file.len() as u64)
}

/// Feeds every blob, last first (the order must not matter), each a copy of its range of `file`.
fn feed_all(stream: &mut GpuStream, file: &[u8]) -> loom_wasm::Result<()> {
    let blobs: Vec<(String, std::ops::Range<u64>)> = stream.blobs().map(|(b, r)| (b.path.clone(), r)).collect();
    for (path, r) in blobs.into_iter().rev() {
        let data = Bytes::copy_from_slice(&file[r.start as usize..r.end as usize]);
        pollster::block_on(stream.feed(&path, data))?;
    }
    Ok(())
}

#[test]
fn streamed_corpus_networks_match_the_fully_read_file_on_the_gpu() {
    let (mut same, mut both_refused, mut against_loom) = (0, 0, 0);
    for dir in ["conformance", "loom-extra"] {
        let root = testdata().join(dir);
        let manifest: Value =
            serde_json::from_str(&std::fs::read_to_string(root.join("manifest.json")).unwrap()).unwrap();
        for case in manifest["cases"].as_array().unwrap() {
            let (Some(file), Some(input)) = (case["files"]["loom.entity"].as_str(), case["input_f32_hex"].as_str())
            else {
                continue;
            };
            let id = format!("{dir}/{}", case["id"].as_str().unwrap());
            let bytes = std::fs::read(root.join(file)).unwrap();
            let input = hex_f32s(input).unwrap();
            let shape: Vec<usize> = serde_json::from_value(case["input_shape"].clone()).unwrap();

            let full = GpuModel::new(gpu(), entity::read(&bytes).unwrap())
                .and_then(|mut m| pollster::block_on(m.forward(&input, &shape)));
            let mut stream = begin(&bytes).unwrap();
            feed_all(&mut stream, &bytes).unwrap_or_else(|e| panic!("{id}: feeding: {e}"));
            // Only layers that run on the CPU keep host weights.
            let model = stream.model();
            // No corpus layer is beyond lavapipe's limits: one run on the CPU would go unchecked on the GPU.
            assert!(
                model.cpu_layers().is_empty(),
                "{id}: ran on the CPU: {:?}",
                model.cpu_layers()
            );
            model.network().for_each_layer(&mut |path, layer| {
                let kept = layer.weights.is_some() || !layer.extra_blobs.is_empty();
                assert!(
                    !kept || model.cpu_layers().contains_key(path),
                    "{id}: {path} kept its host weights"
                );
            });
            let streamed = pollster::block_on(stream.forward(&input, &shape));
            match (full, streamed) {
                (Ok(want), Ok(got)) => {
                    assert_eq!(got.shape, want.shape, "{id}");
                    exact(&id, &got.data, &want.data);
                    same += 1;
                    if case["roundtrip"]["forward_after_entity_reload_identical"] == true {
                        let loom = hex_f32s(case["expected_output_f32_hex"].as_str().unwrap()).unwrap();
                        let (abs, rel) = GPU_TOLERANCE;
                        close(&format!("{id} vs Loom"), &got.data, &loom, abs, rel);
                        against_loom += 1;
                    }
                }
                (Err(a), Err(b)) => {
                    assert_eq!(a.code(), b.code(), "{id}: {a} / {b}");
                    both_refused += 1;
                }
                (a, b) => panic!("{id}: full read {:?}, streamed {:?}", a.err(), b.err()),
            }
        }
    }
    eprintln!("{same} identical, {against_loom} of them also checked against Loom, {both_refused} refused by both");
    // Every case of both corpora streams, counted exactly: none may vanish, and a valid corpus file that both
    // paths refuse is a failure, not a pass.
    assert_eq!((same, against_loom, both_refused), (771, 703, 0));
}

#[test]
fn a_short_prefix_asks_for_the_whole_header() {
    let bytes = std::fs::read(testdata().join("conformance/cases/grid_2x1x2x2/loom.entity")).unwrap();
    let header_end = entity::read_header(&bytes).unwrap().payload_offset();
    let len = bytes.len() as u64;
    for (prefix, needed) in [
        (0, 20),
        (10, 20),
        (20, header_end),
        (header_end as usize - 1, header_end),
    ] {
        let err = GpuStream::begin(gpu(), &bytes[..prefix], len).err().unwrap();
        assert_eq!(
            err,
            LoomError::NeedMore {
                needed,
                available: prefix as u64
            }
        );
    }
    // The absolute ranges are the file's bytes of each blob.
    let stream = GpuStream::begin(gpu(), &bytes[..header_end as usize], len).unwrap();
    let table = entity::read_header(&bytes).unwrap().blobs;
    let ranges: Vec<_> = stream.blobs().map(|(b, r)| (b.path.clone(), r)).collect();
    assert_eq!(ranges.len(), table.len());
    for ((path, r), b) in ranges.iter().zip(&table) {
        assert_eq!(
            (path, r.start, r.end),
            (&b.path, header_end + b.offset, header_end + b.offset + b.length)
        );
    }
}

#[test]
fn one_blob_decodes_as_the_reader_decodes_it() {
    // `with_blob` (tensor statistics of one layer) installs exactly what the full read installs.
    let bytes = std::fs::read(testdata().join("conformance/cases/grid_2x1x2x2/loom.entity")).unwrap();
    let full = entity::read(&bytes).unwrap();
    let stream = begin(&bytes).unwrap();
    let blobs: Vec<_> = stream.blobs().map(|(b, r)| (b.path.clone(), r)).collect();
    for (path, r) in blobs {
        let net = stream
            .with_blob(&path, Bytes::copy_from_slice(&bytes[r.start as usize..r.end as usize]))
            .unwrap();
        let i: usize = path.strip_prefix("layers.").unwrap().parse().unwrap();
        assert!(net.layers[i].weights.is_some());
        assert_eq!(net.layers[i].weights, full.layers[i].weights, "{path}");
        assert_eq!(net.layers[i].dtype, full.layers[i].dtype, "{path}");
    }
}

/// `file` with its header JSON changed by `edit` (the payload kept as is).
fn with_header(file: &[u8], edit: impl Fn(&str) -> String) -> Vec<u8> {
    let end = entity::read_header(file).unwrap().payload_offset() as usize;
    let text = edit(std::str::from_utf8(&file[20..end]).unwrap());
    let mut out = file[..12].to_vec();
    out.extend((text.len() as u64).to_le_bytes());
    out.extend(text.as_bytes());
    out.extend(&file[end..]);
    out
}

#[test]
fn bad_missing_and_oversized_blobs_are_typed_errors() {
    let bytes = std::fs::read(testdata().join("conformance/cases/grid_2x1x2x2/loom.entity")).unwrap();
    let ranges: Vec<_> = begin(&bytes)
        .unwrap()
        .blobs()
        .map(|(b, r)| (b.path.clone(), r))
        .collect();
    let blob = |i: usize| {
        let r = &ranges[i].1;
        Bytes::copy_from_slice(&bytes[r.start as usize..r.end as usize])
    };
    let invalid_input = |e: LoomError, what: &str| {
        assert!(matches!(e, LoomError::InvalidInput(ref m) if m.contains(what)), "{e:?}");
    };

    let mut stream = begin(&bytes).unwrap();
    let (path0, path1) = (ranges[0].0.as_str(), ranges[1].0.as_str());
    // One byte too many, one too few, a blob the table does not have.
    let mut longer = blob(0).to_vec();
    longer.push(0);
    invalid_input(
        pollster::block_on(stream.feed(path0, longer.into())).unwrap_err(),
        "bytes long",
    );
    invalid_input(
        pollster::block_on(stream.feed(path0, blob(0).slice(1..))).unwrap_err(),
        "bytes long",
    );
    invalid_input(
        pollster::block_on(stream.feed("layers.99", blob(0))).unwrap_err(),
        "no blob",
    );
    // Fed once only.
    pollster::block_on(stream.feed(path0, blob(0))).unwrap();
    invalid_input(
        pollster::block_on(stream.feed(path0, blob(0))).unwrap_err(),
        "already fed",
    );
    // A forward before every blob is in.
    let n_in = entity::read(&bytes).unwrap().layers[0].input_height as usize;
    let err = pollster::block_on(stream.forward(&vec![0.5; n_in], &[1, n_in])).unwrap_err();
    invalid_input(err, &format!("first: {path1}"));

    // Headers the reader refuses are refused the same way, at `begin` or when the blob arrives.
    let first = entity::read_header(&bytes).unwrap().blobs[0].clone();
    let entry = |path: &str, length: u64, dtype: &str| {
        format!(
            r#""path":"{path}","offset":{},"length":{length},"dtype":"{dtype}""#,
            first.offset
        )
    };
    let original = entry(&first.path, first.length, &first.dtype);
    for (what, edited, at_begin) in [
        (
            "a blob shorter than its layer's weights",
            entry(&first.path, first.length - 1, &first.dtype),
            false,
        ),
        ("an unknown dtype", entry(&first.path, first.length, "int3"), false),
        (
            "a blob naming no layer",
            entry("layers.9", first.length, &first.dtype),
            true,
        ),
        (
            "a malformed path",
            entry("layers.0.biasez", first.length, &first.dtype),
            true,
        ),
    ] {
        let bad = with_header(&bytes, |h| {
            assert!(h.contains(&original), "{h}");
            h.replacen(&original, &edited, 1)
        });
        let want = entity::read(&bad).unwrap_err();
        let header = entity::read_header(&bad).unwrap();
        let got = match GpuStream::begin(gpu(), &bad[..header.payload_offset() as usize], bad.len() as u64) {
            Err(e) => {
                assert!(at_begin, "{what}: refused at begin: {e}");
                e
            }
            Ok(mut stream) => {
                assert!(!at_begin, "{what}: accepted at begin");
                let r = stream.blobs().next().map(|(_, r)| r).unwrap();
                let data = Bytes::copy_from_slice(&bad[r.start as usize..r.end as usize]);
                pollster::block_on(stream.feed(&header.blobs[0].path, data)).unwrap_err()
            }
        };
        assert_eq!(got, want, "{what}");
        eprintln!("{what}: {got} ({})", got.code());
    }
    // A file cut short: the last blob lies past its end.
    let cut = &bytes[..bytes.len() - 1];
    let err = GpuStream::begin(gpu(), &cut[..ranges[0].1.start as usize], cut.len() as u64)
        .err()
        .unwrap();
    assert!(matches!(err, LoomError::BlobOutOfRange { .. }), "{err:?}");
    assert_eq!(err, entity::read(cut).unwrap_err());
}
