//! Property tests of the 21 dtype codecs (spec §1–4), Loom's Q4_0 blocks (§8), and of the readers on random
//! input (no panic, whatever the bytes).

use loom_wasm::dtype::q4_0::{self, Q4Blocks, BLOCK};
use loom_wasm::dtype::{auto_scale, dequantize, pack_codes, quantize, unpack, unpack_codes};
use loom_wasm::formats::{entity, loom_json};
use loom_wasm::DType;
use proptest::prelude::*;

fn any_dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(DType::ALL.to_vec())
}

fn sub_byte_dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(DType::ALL.iter().copied().filter(|d| d.bits() < 8).collect::<Vec<_>>())
}

/// Every float32 bit pattern: NaNs, infinities, subnormals, signed zeros.
fn any_f32() -> impl Strategy<Value = f32> {
    any::<u32>().prop_map(f32::from_bits)
}

/// Weights of ordinary size, zeros included, so that scales stay normal floats.
fn weight() -> impl Strategy<Value = f32> {
    prop_oneof![
        1 => Just(0.0f32),
        1 => Just(-0.0f32),
        8 => -1.0e4f32..1.0e4f32,
        2 => -1.0f32..1.0f32,
    ]
}

/// The clamp range of the integer codes (spec §3), for the dtypes that clamp.
fn clamp_range(dt: DType) -> Option<(f32, f32)> {
    Some(match dt {
        DType::Int4 => (-8.0, 7.0),
        DType::Uint4 => (0.0, 15.0),
        DType::Int8 => (-128.0, 127.0),
        DType::Uint8 => (0.0, 255.0),
        DType::Int2 => (-2.0, 1.0),
        DType::Uint2 => (0.0, 3.0),
        DType::Ternary => (-1.0, 1.0),
        DType::Int16 => (-32768.0, 32767.0),
        _ => return None,
    })
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// quantize writes exactly Loom's native size, for any values and any scale (NaN, ±Inf, 0 included).
    #[test]
    fn quantize_length_is_packed_len(dt in any_dtype(), w in prop::collection::vec(any_f32(), 0..100), scale in any_f32()) {
        prop_assert_eq!(Some(quantize(dt, &w, scale).len()), dt.packed_len(w.len()));
    }

    /// Decoding then encoding native bytes is the identity (spec §4), padding bits included: binary padding
    /// decodes to -1 and re-encodes to the same bit, whatever it was.
    #[test]
    fn unpack_then_pack_reproduces_any_bytes(dt in any_dtype(), bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let codes = unpack_codes(dt, &bytes);
        // One code per element for the sub-byte types; whole-byte types pass through as given.
        let len = if dt.bits() < 8 { dt.unpacked_len(bytes.len()) } else { bytes.len() };
        prop_assert_eq!(codes.len(), len);
        prop_assert_eq!(pack_codes(dt, &codes), bytes);
    }

    /// Codes in a sub-byte dtype's domain pack and unpack back, followed by the padding elements
    /// (0 for the integer types and fp4, -1 for binary).
    #[test]
    fn pack_then_unpack_keeps_codes(dt in sub_byte_dtype(), raw in prop::collection::vec(any::<u8>(), 0..64)) {
        let bits = dt.bits() as u32;
        let codes: Vec<u8> = raw
            .iter()
            .map(|r| match dt {
                DType::Binary => if r & 1 == 1 { 1 } else { 255 },
                DType::Int4 | DType::Int2 | DType::Ternary => {
                    // A sign-extended value of `bits` bits.
                    let v = (*r as i8) >> (8 - bits);
                    v as u8
                }
                _ => r >> (8 - bits),
            })
            .collect();
        let packed = pack_codes(dt, &codes);
        prop_assert_eq!(Some(packed.len()), dt.packed_len(codes.len()));
        let back = unpack_codes(dt, &packed);
        prop_assert_eq!(&back[..codes.len()], &codes[..]);
        let pad = if dt == DType::Binary { 255 } else { 0 };
        prop_assert!(back[codes.len()..].iter().all(|c| *c == pad));
        prop_assert!(back.len() - codes.len() < 8 / dt.bits());
    }

    /// Length laws: packing n elements and decoding them yields n plus less than one byte of padding.
    #[test]
    fn unpacked_len_laws(dt in any_dtype(), n in 0usize..10_000, nbytes in 0usize..10_000) {
        let packed = dt.packed_len(n).unwrap();
        let unpacked = dt.unpacked_len(packed);
        prop_assert!(unpacked >= n);
        prop_assert!(unpacked - n < (8 / dt.bits()).max(1));
        let whole = dt.unpacked_len(nbytes);
        if dt.bits() < 8 {
            prop_assert_eq!(dt.packed_len(whole), Some(nbytes));
        } else {
            // Wider types drop a partial tail (spec §4).
            prop_assert_eq!(dt.packed_len(whole), Some(nbytes - nbytes % (dt.bits() / 8)));
        }
        let bytes = vec![0u8; nbytes % 256];
        for cap in [0, n % 300, usize::MAX] {
            let len = cap.min(dt.unpacked_len(bytes.len()));
            prop_assert_eq!(dequantize(dt, &bytes, 0.5, cap).len(), len);
            prop_assert_eq!(unpack(dt, &bytes, 0.5, cap).len(), len);
        }
    }

    /// With a fixed scale, re-quantizing dequantized values gives the same bytes: the codes are fixed points.
    /// The integer codes must be exact in float32 (|q| < 2^22); FP8 additionally needs an exact (power-of-two)
    /// scale because e4m3/e5m2 truncate rather than round.
    #[test]
    fn quantize_is_idempotent_with_a_fixed_scale(
        dt in any_dtype(),
        w in prop::collection::vec(weight(), 0..64),
        mantissa in 1.0f32..2.0,
        exp in -12i32..12,
    ) {
        let pow2 = 2f32.powi(exp);
        let scale = if matches!(dt, DType::Fp8E4M3 | DType::Fp8E5M2) { pow2 } else { mantissa * pow2 };
        prop_assume!(w.iter().all(|x| (x / scale).abs() < (1 << 22) as f32));
        let q1 = quantize(dt, &w, scale);
        let y = dequantize(dt, &q1, scale, w.len());
        prop_assert_eq!(y.len(), w.len());
        let q2 = quantize(dt, &y, scale);
        prop_assert_eq!(&q2, &q1);
        // And the dequantized values themselves are stable.
        prop_assert_eq!(bits(&dequantize(dt, &q2, scale, w.len())), bits(&y));
    }

    /// With Loom's auto-scale, each dequantized value lies within half a step (the scale) of the weight clamped
    /// into the dtype's range.
    #[test]
    fn auto_scaled_values_are_within_half_a_step(
        dt in prop::sample::select(vec![
            DType::Int4, DType::Uint4, DType::Int8, DType::Uint8, DType::Int2, DType::Uint2, DType::Ternary, DType::Int16,
        ]),
        w in prop::collection::vec(weight(), 1..64),
    ) {
        let scale = auto_scale(dt, &w);
        prop_assert!(scale > 0.0 && scale.is_finite());
        let (lo, hi) = clamp_range(dt).unwrap();
        let d = dequantize(dt, &quantize(dt, &w, scale), scale, w.len());
        for (x, y) in w.iter().zip(&d) {
            let clamped = x.clamp(lo * scale, hi * scale);
            let tol = scale / 2.0 * (1.0 + 1e-5) + clamped.abs() * 1e-6;
            prop_assert!((y - clamped).abs() <= tol, "{dt}: x={x} y={y} scale={scale}");
        }
        // The largest |w| needs no clamp in the signed types: auto-scale maps it to ±D.
        if !matches!(dt, DType::Uint4 | DType::Uint8 | DType::Uint2) {
            let (i, max) = w.iter().enumerate().fold((0, 0f32), |m, (i, x)| if x.abs() > m.1 { (i, x.abs()) } else { m });
            if max > 0.0 {
                prop_assert!((d[i].abs() - max).abs() <= scale / 2.0 + max * 1e-5);
            }
        }
    }

    /// Binary keeps signs and the mean magnitude: every value is ±auto-scale, + for w ≥ 0.
    #[test]
    fn binary_keeps_signs(w in prop::collection::vec(weight(), 1..64)) {
        let s = auto_scale(DType::Binary, &w);
        let d = dequantize(DType::Binary, &quantize(DType::Binary, &w, s), s, w.len());
        for (x, y) in w.iter().zip(&d) {
            prop_assert_eq!(*y, if x / s >= 0.0 { s } else { -s });
        }
    }

    /// Q4_0: pack parses, re-encodes to the same bytes, and dequantizes within half a block step of the input.
    #[test]
    fn q4_0_round_trips(w in prop::collection::vec(prop_oneof![weight(), -1.0e30f32..1.0e30], 0..300)) {
        let packed = q4_0::pack(&w);
        let blocks = Q4Blocks::parse(&packed).unwrap();
        prop_assert_eq!(blocks.scales.len(), w.len().div_ceil(BLOCK));
        prop_assert_eq!(blocks.words.len(), q4_0::packed_words(blocks.scales.len()));
        prop_assert_eq!(blocks.to_bytes(), packed);
        let d = blocks.dequantize(w.len());
        prop_assert_eq!(d.len(), w.len());
        for (i, (x, y)) in w.iter().zip(&d).enumerate() {
            let s = blocks.scales[i / BLOCK];
            prop_assert!((x - y).abs() <= s / 2.0 * (1.0 + 1e-5) + x.abs() * 1e-6, "i={i} x={x} y={y} s={s}");
        }
        // Capacity caps the count.
        prop_assert_eq!(blocks.dequantize(usize::MAX).len(), blocks.scales.len() * BLOCK);
    }

    /// Random bytes never panic the Q4_0 parser; whatever it accepts re-encodes to the same bytes.
    #[test]
    fn q4_0_parse_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..4200), counts in any::<(u32, u32)>(), fix in any::<bool>()) {
        let mut b = bytes;
        if fix && b.len() >= 8 {
            // Plausible counts make the length checks the interesting part.
            let words = (b.len() as u32 - 8) / 4;
            let scales = counts.0 % (words + 1);
            b[..4].copy_from_slice(&scales.to_le_bytes());
            b[4..8].copy_from_slice(&(words - scales + counts.1 % 2).to_le_bytes());
        }
        if let Ok(blocks) = Q4Blocks::parse(&b) {
            prop_assert_eq!(blocks.to_bytes(), b.clone());
            let _ = blocks.dequantize(usize::MAX);
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// The readers on random input.

fn corpus(file: &str) -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/conformance/cases");
    [
        "nested_int4",
        "layer_Dense_int4",
        "grid_2x1x2x2",
        "layer_MultiHeadAttention_int8",
        "transformer_int4",
    ]
    .iter()
    .map(|c| std::fs::read(dir.join(c).join(file)).unwrap())
    .collect()
}

/// A corpus file with a few bytes overwritten, removed or inserted.
fn mutated(files: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    (
        prop::sample::select(files),
        prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..6),
    )
        .prop_map(|(mut f, edits)| {
            for (at, byte, kind) in edits {
                if f.is_empty() {
                    break;
                }
                let i = at.index(f.len());
                match kind {
                    0 => f[i] = byte,
                    1 => {
                        f.remove(i);
                    }
                    _ => f.insert(i, byte),
                }
            }
            f
        })
}

/// A valid ENTITY preamble whose header_len matches, followed by arbitrary header bytes and payload.
fn entity_with_random_header() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::collection::vec(any::<u8>(), 0..300),
        prop::collection::vec(any::<u8>(), 0..64),
    )
        .prop_map(|(h, p)| {
            let mut f = entity::MAGIC.to_vec();
            f.extend_from_slice(&1u16.to_le_bytes());
            f.extend_from_slice(&0u16.to_le_bytes());
            f.extend_from_slice(&(h.len() as u64).to_le_bytes());
            f.extend(h);
            f.extend(p);
            f
        })
}

/// JSON-looking text made of the tokens Loom files use.
fn jsonish() -> impl Strategy<Value = String> {
    let token = prop::sample::select(vec![
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        "\"type\"",
        "\"Dense\"",
        "\"layers\"",
        "\"depth\"",
        "\"rows\"",
        "\"cols\"",
        "\"layers_per_cell\"",
        "\"weights\"",
        "\"native\"",
        "\"scale\"",
        "\"dtype\"",
        "\"int4\"",
        "\"input_height\"",
        "\"output_height\"",
        "\"parallel_branches\"",
        "\"AAAA\"",
        "1",
        "0",
        "-1",
        "3",
        "1e39",
        "0.5",
        "true",
        "false",
        "null",
        " ",
    ]);
    prop::collection::vec(token, 0..80).prop_map(|t| t.concat())
}

fn check_entity(bytes: &[u8]) {
    let _ = entity::header_len(bytes);
    let _ = entity::read_header(bytes);
    let _ = entity::layer_blob(bytes, 0);
    let _ = entity::read_layers(bytes, &[1]);
    if let Ok(mut net) = entity::read(bytes) {
        let written = entity::write(&mut net).expect("a network read from a file saves");
        entity::read(&written).expect("a saved network reads back");
    }
}

fn check_json(bytes: &[u8]) {
    if let Ok(mut net) = loom_json::read(bytes) {
        let written = loom_json::write(&mut net).expect("a network read from a file saves");
        loom_json::read(&written).expect("a saved network reads back");
    }
    if let Ok(mut net) = loom_json::build(bytes) {
        let written = loom_json::write(&mut net).expect("a built network saves");
        loom_json::read(&written).expect("a saved network reads back");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic_the_readers(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        check_entity(&bytes);
        check_json(&bytes);
    }

    #[test]
    fn random_headers_never_panic_the_entity_reader(bytes in entity_with_random_header()) {
        check_entity(&bytes);
    }

    #[test]
    fn mutated_entity_files_never_panic(bytes in mutated(corpus("loom.entity"))) {
        check_entity(&bytes);
    }

    #[test]
    fn mutated_json_files_never_panic(bytes in mutated(corpus("loom.json"))) {
        check_json(&bytes);
    }

    #[test]
    fn jsonish_text_never_panics(text in jsonish()) {
        check_json(text.as_bytes());
        let mut f = entity::MAGIC.to_vec();
        f.extend_from_slice(&1u16.to_le_bytes());
        f.extend_from_slice(&0u16.to_le_bytes());
        f.extend_from_slice(&(text.len() as u64).to_le_bytes());
        f.extend_from_slice(text.as_bytes());
        check_entity(&f);
    }
}
