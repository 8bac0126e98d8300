//! Helpers shared by the hostile-input suites: corpus access, `.entity` surgery and an allocator that records
//! the largest single allocation made by the current thread.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::PathBuf;

use loom_wasm::formats::entity::{MAGIC, PREAMBLE_LEN};
use serde_json::Value;

/// Refuses any single allocation above this (1 GiB): a hostile input must fail the test, not the machine.
const HARD_CAP: usize = 1 << 30;

/// Records per thread the largest allocation requested while a measurement is running.
pub struct Tracking;

thread_local! {
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

fn note(size: usize) {
    let _ = PEAK.try_with(|p| {
        if size > p.get() {
            p.set(size);
        }
    });
}

unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        if layout.size() > HARD_CAP {
            return std::ptr::null_mut();
        }
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        if layout.size() > HARD_CAP {
            return std::ptr::null_mut();
        }
        System.alloc_zeroed(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        if new_size > HARD_CAP {
            return std::ptr::null_mut();
        }
        System.realloc(ptr, layout, new_size)
    }
}

/// Runs `f` and returns its result with the largest single allocation it made on this thread.
pub fn peak_alloc<R>(f: impl FnOnce() -> R) -> (R, usize) {
    PEAK.with(|p| p.set(0));
    let r = f();
    (r, PEAK.with(|p| p.get()))
}

/// What a parser may allocate at most for an input of `len` bytes: proportional to the input (parsed JSON and
/// the layer structs are bigger than their text), plus a small constant. Never anything a header merely claims.
pub fn alloc_bound(len: usize) -> usize {
    32 * len + (4 << 20)
}

/// Runs a parser on `input`, checks the allocation bound and returns the error it must give.
pub fn must_fail<T: std::fmt::Debug>(
    input: &[u8],
    f: impl FnOnce(&[u8]) -> loom_wasm::Result<T>,
) -> loom_wasm::LoomError {
    let (r, peak) = peak_alloc(|| f(input));
    assert!(
        peak <= alloc_bound(input.len()),
        "allocated {peak} bytes for a {}-byte input",
        input.len()
    );
    match r {
        Ok(v) => {
            let shown = format!("{v:?}");
            let cut = shown.char_indices().nth(300).map_or(shown.len(), |(i, _)| i);
            panic!(
                "accepted hostile input {:?}: {}",
                String::from_utf8_lossy(&input[..input.len().min(600)]),
                &shown[..cut]
            )
        }
        Err(e) => e,
    }
}

/// Asserts that `$e` matches the pattern, printing the error otherwise.
#[macro_export]
macro_rules! assert_err {
    ($e:expr, $($p:tt)+) => {{
        let e = $e;
        let shown = format!("{e:?}");
        assert!(matches!(e, $($p)+), "unexpected error: {shown}");
    }};
}

pub fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/conformance/cases")
}

pub fn corpus_file(case: &str, file: &str) -> Vec<u8> {
    let p = corpus_dir().join(case).join(file);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Every corpus case that has the given file, as (id, bytes), in name order.
pub fn corpus_files(file: &str) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<_> = std::fs::read_dir(corpus_dir())
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            let bytes = std::fs::read(e.path().join(file)).ok()?;
            Some((e.file_name().to_string_lossy().into_owned(), bytes))
        })
        .collect();
    out.sort();
    out
}

/// Splits an `.entity` file into its header JSON and its payload.
pub fn split_entity(bytes: &[u8]) -> (Value, Vec<u8>) {
    let n = u64::from_le_bytes(bytes[12..20].try_into().unwrap()) as usize;
    let header = serde_json::from_slice(&bytes[PREAMBLE_LEN..PREAMBLE_LEN + n]).unwrap();
    (header, bytes[PREAMBLE_LEN + n..].to_vec())
}

/// Assembles an `.entity` file from raw header bytes and a payload.
pub fn entity_raw(header: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&1u16.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(header.len() as u64).to_le_bytes());
    out.extend_from_slice(header);
    out.extend_from_slice(payload);
    out
}

/// Assembles an `.entity` file from a header value and a payload.
pub fn entity_from(header: &Value, payload: &[u8]) -> Vec<u8> {
    entity_raw(serde_json::to_string(header).unwrap().as_bytes(), payload)
}

/// Applies `f` to the header of a corpus `.entity` file and reassembles it with the same payload.
pub fn mutate_entity(bytes: &[u8], f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let (mut header, payload) = split_entity(bytes);
    f(&mut header);
    entity_from(&header, &payload)
}

/// Applies `f` to a parsed Loom JSON file and re-serialises it.
pub fn mutate_json(bytes: &[u8], f: impl FnOnce(&mut Value)) -> Vec<u8> {
    let mut v: Value = serde_json::from_slice(bytes).unwrap();
    f(&mut v);
    serde_json::to_vec(&v).unwrap()
}

/// Sets the member a JSON pointer names, creating it in its parent object when absent.
pub fn set_ptr(v: &mut Value, ptr: &str, new: Value) {
    let (parent, key) = ptr.rsplit_once('/').unwrap();
    match v.pointer_mut(parent).unwrap_or_else(|| panic!("no {parent}")) {
        Value::Object(m) => {
            m.insert(key.to_string(), new);
        }
        Value::Array(a) => a[key.parse::<usize>().unwrap()] = new,
        other => panic!("{parent} is {other}"),
    }
}
