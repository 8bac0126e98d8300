//! CPU matrix kernels over ggml blocks as stored: `y = X·Wᵀ` with float32 accumulation and float32
//! activations, except where the activations are rounded to 16-bit integers per block of 32
//! (`activations::Activations16`) for exact integer dots: decode of one token over a quantized type with
//! WebAssembly simd128 or AVX-512 (with AVX2 alone, over the 5-bit and K-quant types), and prefill over a quantized
//! type with simd128, AVX2 or AVX-512.
//!
//! Decode (one token) dots each row's blocks, dequantized in registers, with the activations. Prefill (several
//! tokens) unpacks a tile of rows once and serves every token with it: as 16-bit codes against the tokens
//! interleaved several to a vector (`simd_avx512_prefill` with AVX-512 VNNI, 16 tokens, and the float types as
//! float32 there; otherwise `prefill` with AVX2, 8, or simd128, 4); elsewhere dequantized to float32 and dotted with
//! each token.
//! Natively, rows are split across a rayon pool ([`set_threads`]) and x86-64 uses AVX2+FMA+F16C (AVX-512 for
//! 16-bit decode) when the CPU has them; in WebAssembly the calling thread does the work, with simd128 when the
//! module is built with it. [`set_simd`] caps the paths (portable, at most AVX2) for tests and comparisons.

use std::sync::atomic::{AtomicU8, Ordering};

use super::activations::Activations16;
use super::{blocks, GgmlType};
use crate::error::{LoomError, Result};

/// A row-major matrix `[rows][cols]` stored as rows of `ty` blocks (a GGUF 2-D tensor: `ne = [cols, rows]`).
#[derive(Clone, Copy, Debug)]
pub struct QMatrix<'a> {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    pub data: &'a [u8],
}

impl<'a> QMatrix<'a> {
    /// Checks that `ty` can compute, `cols` is whole blocks and `data` holds exactly `rows` rows.
    pub fn new(ty: GgmlType, rows: usize, cols: usize, data: &'a [u8]) -> Result<QMatrix<'a>> {
        if !ty.can_compute() {
            return Err(ty.unsupported());
        }
        let row_bytes = ty.row_bytes(cols)?;
        if ty.interleaved() && !rows.is_multiple_of(super::interleaved::ROWS) {
            return Err(LoomError::InvalidInput(format!(
                "{ty} matrix of {rows} rows: not whole groups of {}",
                super::interleaved::ROWS
            )));
        }
        if rows.checked_mul(row_bytes) != Some(data.len()) {
            return Err(LoomError::InvalidInput(format!(
                "{ty} matrix [{rows}][{cols}]: {} bytes, not {rows} rows of {row_bytes}",
                data.len()
            )));
        }
        Ok(QMatrix { ty, rows, cols, data })
    }

    /// The stored bytes of row `r` (`r < rows`, else this panics like slice indexing); for an interleaved type, a
    /// row's length of bytes of its group, not the row.
    fn row(&self, r: usize) -> &'a [u8] {
        let row_bytes = self.cols / self.ty.block_len() * self.ty.block_bytes();
        &self.data[r * row_bytes..(r + 1) * row_bytes]
    }

    /// Row `r` as float32 (`out.len() == cols`), bit-identical to `gguf.quants.dequantize`: an embedding lookup.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) -> Result<()> {
        let w = self.checked()?;
        if r >= w.rows {
            return Err(LoomError::InvalidInput(format!(
                "row {r} of a matrix of {} rows",
                w.rows
            )));
        }
        if out.len() != w.cols {
            return Err(LoomError::InvalidInput(format!(
                "row of {} values into {} values",
                w.cols,
                out.len()
            )));
        }
        w.row_values(Level::current(), r, out);
        Ok(())
    }

    /// Row `r` (`r < rows`) as float32 into `out` (`cols` values), bit-identical to `gguf.quants.dequantize`.
    fn row_values(&self, level: Level, r: usize, out: &mut [f32]) {
        match self.ty {
            ty if ty.interleaved() => super::interleaved::dequantize_row(ty, self.data, self.cols, r, out),
            ty => dequantize_blocks(level, ty, self.row(r), out),
        }
    }

    /// The same matrix checked again: the fields are public, so it may not come from [`QMatrix::new`].
    fn checked(&self) -> Result<QMatrix<'a>> {
        QMatrix::new(self.ty, self.rows, self.cols, self.data)
    }
}

/// `y[t][r] = Σ_c W[r][c] · x[t][c]` for `t` in `0..n` (`x`: `n × cols` row-major, `y`: `n × rows`).
pub fn matmul(w: &QMatrix, x: &[f32], n: usize, y: &mut [f32]) -> Result<()> {
    matmul_each(x, n, &mut [(*w, y)])
}

/// [`matmul`] of several matrices with the same activations (a layer's q, k and v; gate and up): decode rounds
/// the token to 16 bits once for all of them.
pub fn matmul_each(x: &[f32], n: usize, products: &mut [(QMatrix, &mut [f32])]) -> Result<()> {
    for (w, y) in products.iter() {
        let w = w.checked()?;
        if n.checked_mul(w.cols) != Some(x.len()) || n.checked_mul(w.rows) != Some(y.len()) {
            return Err(LoomError::InvalidInput(format!(
                "matmul of a [{}][{}] matrix with {n} tokens: x has {} values, y {}",
                w.rows,
                w.cols,
                x.len(),
                y.len()
            )));
        }
    }
    let level = Level::current();
    if n <= 1 {
        // Rounded once here, not per task or per matrix.
        let x16 = decode_16(level, products.iter().map(|(w, _)| w.ty), x);
        for (w, y) in products.iter_mut() {
            let x16 = x16.as_ref().filter(|_| has_16bit_dot(level, w.ty));
            rows_parallel(w, x, n, level, x16, y);
        }
        return Ok(());
    }
    // Whether a product of a type that `f` picks has rows (and the tokens columns): its tokens are then prepared once.
    #[cfg(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "simd128")))]
    let wants = |f: fn(GgmlType) -> bool| x.len() / n > 0 && products.iter().any(|(w, _)| w.rows > 0 && f(w.ty));
    // With AVX-512 VNNI, the tokens are rounded to 16 bits (quantized types) or interleaved as float32 (float types)
    // sixteen to a vector once for all the matrices; with AVX2 alone, quantized types as 16 bits and float types as
    // float32, eight to a vector.
    #[cfg(target_arch = "x86_64")]
    let (tokens16, tokens32, tokens8, tokens32_8) = {
        use super::prefill::TokensF32;
        use super::simd_avx512_prefill::Tokens16;
        let vnni = vnni(level);
        (
            // SAFETY: `vnni` checked the CPU.
            match vnni && wants(integer_prefill) {
                true => unsafe { Tokens16::new(x, n, x.len() / n) },
                false => None,
            },
            (vnni && wants(float_prefill)).then(|| TokensF32::<16>::new(x, n, x.len() / n)),
            match !vnni && level != Level::Portable && wants(integer_prefill) {
                true => {
                    use super::{prefill::Kernel, simd_x86_prefill::Avx2};
                    super::prefill::Tokens::<8>::new(x, n, x.len() / n, <Avx2 as Kernel<8>>::GROUPS)
                }
                false => None,
            },
            (!vnni && level != Level::Portable && wants(float_prefill)).then(|| TokensF32::<8>::new(x, n, x.len() / n)),
        )
    };
    // In wasm, the tokens are rounded to 16 bits (quantized types) or kept as float32 (float types) and interleaved
    // by four once for all the matrices; not under `set_simd(Simd::None)` (Level::Portable). At Level::Simd128
    // `has_16bit_dot` is every type that has a 16-bit kernel.
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    let simd128 = level == Level::Simd128;
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    let (tokens4, tokens32_4) = (
        match simd128 && wants(super::activations::has_16bit_dot) {
            true => {
                use super::{prefill::Kernel, simd_wasm_prefill::Simd128};
                super::prefill::Tokens::<4>::new(x, n, x.len() / n, <Simd128 as Kernel<4>>::GROUPS)
            }
            false => None,
        },
        (simd128 && wants(float_prefill)).then(|| super::prefill::TokensF32::<4>::new(x, n, x.len() / n)),
    );
    for (w, y) in products.iter_mut() {
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        if let Some(tokens) = tokens4.as_ref().filter(|_| w.rows > 0 && has_16bit_dot(level, w.ty)) {
            use super::{prefill, simd_wasm_prefill::Simd128};
            // SAFETY: the module is built with simd128; `y` holds `n` tokens of `w.rows`, written by this call only.
            unsafe { prefill::rows::<4, Simd128>(w.ty, w.data, 0, tokens, prefill::Output::new(y, w.rows)) };
            continue;
        }
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        if let Some(tokens) = tokens32_4.as_ref().filter(|_| w.rows > 0 && float_prefill(w.ty)) {
            // `y` holds `n` tokens of `w.rows`, written by this call only.
            super::simd_wasm_prefill::rows_f32(w.ty, w.data, 0, tokens, super::prefill::Output::new(y, w.rows));
            continue;
        }
        #[cfg(target_arch = "x86_64")]
        {
            use super::prefill::Output;
            use super::simd_avx512_prefill::{rows, rows_f32};
            let out = Output::new(y, w.rows);
            let row_bytes = if w.rows > 0 { w.row(0).len() } else { 0 };
            let run = |first: usize, count: usize| &w.data[first * row_bytes..(first + count) * row_bytes];
            if let Some(tokens) = tokens16.as_ref().filter(|_| w.rows > 0 && integer_prefill(w.ty)) {
                // SAFETY: `available` checked the CPU and `integer_prefill` the type; a run is whole rows of the
                // tokens' columns, `y` holds `n` tokens of `w.rows`, and each run writes its own rows.
                split_row_runs(w.rows, |first, count| unsafe {
                    rows(w.ty, run(first, count), first, tokens, out)
                });
                continue;
            }
            if let Some(tokens) = tokens8.as_ref().filter(|_| w.rows > 0 && integer_prefill(w.ty)) {
                use super::{prefill, simd_x86_prefill::Avx2};
                // SAFETY: Level::Avx2 and Level::Avx512 mean the CPU has AVX2 and FMA; as above otherwise.
                split_row_runs(w.rows, |first, count| unsafe {
                    prefill::rows::<8, Avx2>(w.ty, run(first, count), first, tokens, out)
                });
                continue;
            }
            if let Some(tokens) = tokens32.as_ref().filter(|_| w.rows > 0 && float_prefill(w.ty)) {
                // SAFETY: as above, for a float type.
                split_row_runs(w.rows, |first, count| unsafe {
                    rows_f32(w.ty, run(first, count), first, tokens, out)
                });
                continue;
            }
            if let Some(tokens) = tokens32_8.as_ref().filter(|_| w.rows > 0 && float_prefill(w.ty)) {
                // SAFETY: Level::Avx2 and Level::Avx512 mean the CPU has AVX2, FMA and F16C; as above otherwise.
                split_row_runs(w.rows, |first, count| unsafe {
                    super::simd_x86_prefill::rows_f32(w.ty, run(first, count), first, tokens, out)
                });
                continue;
            }
        }
        prefill(w, x, n, level, y);
    }
    Ok(())
}

/// The types of the AVX2 and AVX-512 integer prefill: the 16-bit types, and the interleaved ones.
#[cfg(target_arch = "x86_64")]
fn integer_prefill(ty: GgmlType) -> bool {
    super::activations::has_16bit_dot(ty) || ty.interleaved()
}

/// The float types, whose prefill widens a tile of rows to float32 for sixteen (AVX-512), eight (AVX2) or four
/// (wasm) tokens at a time.
#[cfg(any(target_arch = "x86_64", all(target_arch = "wasm32", target_feature = "simd128")))]
fn float_prefill(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
}

/// [`matmul`] of several tokens.
fn prefill(w: &QMatrix, x: &[f32], n: usize, level: Level, y: &mut [f32]) {
    // Rows in parallel write row-major [rows][n]; transposed into y afterwards.
    let mut by_row = vec![0.0; y.len()];
    rows_parallel(w, x, n, level, None, &mut by_row);
    transpose(&by_row, n, y);
}

/// `by_row` (`[rows][n]`) into `y` (`[n][rows]`).
fn transpose(by_row: &[f32], n: usize, y: &mut [f32]) {
    let rows = by_row.len() / n;
    // Eight rows at a time, so that each token's writes are eight neighbours, not eight cache lines.
    for (r8, rows8) in by_row.chunks(8 * n).enumerate() {
        for (t, y) in y.chunks_exact_mut(rows).enumerate() {
            for (k, row) in rows8.chunks_exact(n).enumerate() {
                y[8 * r8 + k] = row[t];
            }
        }
    }
}

/// The most the kernels may use: [`Simd`] as a number (`Simd::All` by default).
static SIMD: AtomicU8 = AtomicU8::new(Simd::All as u8);

/// A cap on the instruction sets the kernels use, for tests and comparisons.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Simd {
    /// The portable path only.
    None,
    /// At most AVX2 + FMA + F16C on x86-64 (as a CPU without AVX-512 runs); elsewhere the same as `All`.
    Avx2,
    /// At most AVX-512 F and BW on x86-64, without the VNNI prefill (as a CPU without VNNI runs); elsewhere the same
    /// as `All`.
    Avx512,
    /// The best the CPU (or the wasm module) has.
    All,
}

/// Caps the SIMD paths (the default is [`Simd::All`]); process-wide.
pub fn set_simd(limit: Simd) {
    SIMD.store(limit as u8, Ordering::Relaxed);
}

/// The kernel family decode and prefill use now: "portable", "avx2", "avx512", "avx512-vnni" or "simd128".
pub fn simd_in_use() -> &'static str {
    match Level::current() {
        Level::Portable => "portable",
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => "avx2",
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 if vnni(Level::Avx512) => "avx512-vnni",
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => "avx512",
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Level::Simd128 => "simd128",
    }
}

/// Whether the AVX-512 VNNI kernels (prefill, and the interleaved decode) run at `level`: the CPU has them and the
/// cap allows them.
#[cfg(target_arch = "x86_64")]
fn vnni(level: Level) -> bool {
    level == Level::Avx512 && SIMD.load(Ordering::Relaxed) == Simd::All as u8 && super::simd_avx512_prefill::available()
}

/// The instruction set the kernels use.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Level {
    Portable,
    /// AVX2, FMA and F16C (checked at run time).
    #[cfg(target_arch = "x86_64")]
    Avx2,
    /// All of `Avx2`'s plus AVX-512 F and BW (checked at run time): 16-bit decode and the wider prefill dot.
    #[cfg(target_arch = "x86_64")]
    Avx512,
    /// WebAssembly simd128 (the module was built with it).
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    Simd128,
}

impl Level {
    pub(super) fn current() -> Level {
        let limit = SIMD.load(Ordering::Relaxed);
        if limit == Simd::None as u8 {
            return Level::Portable;
        }
        #[cfg(target_arch = "x86_64")]
        if super::simd_x86::available() {
            return match limit >= Simd::Avx512 as u8 && super::simd_avx512::available() {
                true => Level::Avx512,
                false => Level::Avx2,
            };
        }
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        return Level::Simd128;
        #[allow(unreachable_code)]
        Level::Portable
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod pool {
    use std::sync::{Arc, RwLock};

    use crate::error::{LoomError, Result};

    /// The pool [`set_threads`] built; `None`: rayon's global pool (a thread per core).
    static POOL: RwLock<Option<Arc<rayon::ThreadPool>>> = RwLock::new(None);

    /// Runs the kernels on `n` threads from now on (0: one per core). Builds the pool once per call, not per
    /// matmul.
    pub fn set_threads(n: usize) -> Result<()> {
        let pool = match n {
            0 => None,
            n => Some(Arc::new(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n)
                    .build()
                    .map_err(|e| LoomError::Unsupported(format!("a pool of {n} threads: {e}")))?,
            )),
        };
        *POOL.write().unwrap_or_else(|e| e.into_inner()) = pool;
        Ok(())
    }

    /// Whether the configured pool has one thread: the caller then does the work itself, since handing each
    /// matmul to a pool thread and waiting costs microseconds per call.
    pub(super) fn single_threaded() -> bool {
        let pool = POOL.read().unwrap_or_else(|e| e.into_inner());
        pool.as_ref().is_some_and(|p| p.current_num_threads() == 1)
    }

    /// Runs `f` on a thread of the configured pool (rayon's global one when none is), so that the matmuls it
    /// calls split their rows from inside the pool instead of handing each one over from outside and waiting.
    pub fn in_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
        let pool = POOL.read().unwrap_or_else(|e| e.into_inner()).clone();
        match pool {
            Some(pool) if pool.current_num_threads() > 1 => pool.install(f),
            Some(_) => f(),
            None => rayon::scope(|_| f()),
        }
    }

    /// Runs `f` in the configured pool.
    pub(in crate::quant) fn install<R: Send>(f: impl FnOnce() -> R + Send) -> R {
        let pool = POOL.read().unwrap_or_else(|e| e.into_inner()).clone();
        match pool {
            Some(pool) => pool.install(f),
            None => f(),
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
pub(super) use pool::install;
#[cfg(not(target_arch = "wasm32"))]
pub use pool::{in_pool, set_threads};

/// WebAssembly has no pool: runs `f`.
#[cfg(target_arch = "wasm32")]
pub fn in_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    f()
}

/// WebAssembly runs the kernels on the calling thread; the count is accepted and ignored.
#[cfg(target_arch = "wasm32")]
pub fn set_threads(_n: usize) -> Result<()> {
    Ok(())
}

/// `f(i, chunk, scratch)` for every `chunk_len` chunk `i` of `out`, the chunks split across the pool natively; each
/// task gets its own scratch of `scratch_len` values.
pub fn par_chunks(
    out: &mut [f32],
    chunk_len: usize,
    scratch_len: usize,
    f: impl Fn(usize, &mut [f32], &mut [f32]) + Send + Sync,
) {
    #[cfg(not(target_arch = "wasm32"))]
    if !pool::single_threaded() {
        use rayon::prelude::*;
        pool::install(|| {
            out.par_chunks_mut(chunk_len)
                .enumerate()
                .for_each_init(|| vec![0.0; scratch_len], |scratch, (i, c)| f(i, c, scratch))
        });
        return;
    }
    let mut scratch = vec![0.0; scratch_len];
    for (i, c) in out.chunks_mut(chunk_len).enumerate() {
        f(i, c, &mut scratch);
    }
}

/// `f(item)` for each of `items`, over the configured pool where it has more than one thread.
#[cfg(target_arch = "x86_64")]
pub(super) fn par_each<T: Send>(items: &mut [T], f: impl Fn(&mut T) + Send + Sync) {
    if pool::single_threaded() {
        items.iter_mut().for_each(f);
        return;
    }
    use rayon::prelude::*;
    pool::install(|| items.par_iter_mut().for_each(f));
}

/// Fewest rows one task computes, so that a task outweighs its scheduling.
#[cfg(not(target_arch = "wasm32"))]
const MIN_TASK_ROWS: usize = 16;

/// A 16-bit decode kernel: the dots of a run of stored rows (`out.len()` of them, each as long) with rounded
/// activations.
type Kernel16 = unsafe fn(GgmlType, &[u8], &Activations16, &mut [f32]);

/// `out[i] = dot(row i)` over the `out.len()` equal rows in `rows`.
#[inline(always)]
pub(super) fn each_row(rows: &[u8], out: &mut [f32], dot: impl Fn(&[u8]) -> f32) {
    each_pair(rows, out, |r0, r1| [dot(r0), dot(r1)], &dot);
}

/// [`each_row`] with a kernel for two rows at a time (`pair`) beside the one for a row (`one`): [`far_pairs`], each
/// pair's next rows prefetched.
#[inline(always)]
pub(super) fn each_pair(
    rows: &[u8],
    out: &mut [f32],
    pair: impl Fn(&[u8], &[u8]) -> [f32; 2],
    one: impl Fn(&[u8]) -> f32,
) {
    if out.is_empty() {
        return;
    }
    let row_bytes = rows.len() / out.len();
    let ahead = PREFETCH_BYTES.div_ceil(row_bytes) * row_bytes;
    let prefetch_row = |row: &[u8]| prefetch(row.as_ptr().wrapping_add(ahead), row_bytes);
    far_pairs(
        rows,
        out,
        |r0, r1| {
            prefetch_row(r0);
            prefetch_row(r1);
            pair(r0, r1)
        },
        one,
    );
}

/// `[out[i], out[h + i]] = pair(row i, row h + i)` over the `out.len()` equal rows in `rows`, `h` half of them, then
/// `out[last] = one(last row)` where they are odd. Rows far apart are two streams through memory, which a core
/// fetches faster than one: decode 1.2–1.8× in wasm, which has no prefetch, and 1.04–1.09× natively with it
/// (BENCHMARKS.md).
#[inline(always)]
pub(super) fn far_pairs(
    rows: &[u8],
    out: &mut [f32],
    mut pair: impl FnMut(&[u8], &[u8]) -> [f32; 2],
    one: impl Fn(&[u8]) -> f32,
) {
    if out.is_empty() {
        return;
    }
    let row_bytes = rows.len() / out.len();
    let half = out.len() / 2;
    let (top, bottom) = out.split_at_mut(half);
    let (rows_top, rows_bottom) = rows.split_at(half * row_bytes);
    let firsts = top.iter_mut().zip(rows_top.chunks_exact(row_bytes));
    for ((y0, r0), (y1, r1)) in firsts.zip(bottom.iter_mut().zip(rows_bottom.chunks_exact(row_bytes))) {
        [*y0, *y1] = pair(r0, r1);
    }
    if bottom.len() > half {
        bottom[half] = one(&rows_bottom[half * row_bytes..]);
    }
}

/// How far ahead of its reads a decode kernel asks the cache for a matrix's bytes: decode reads each weight once,
/// and without it the reads wait on memory (SmolLM2 decode 1.2–1.4× faster with it on a Xeon, BENCHMARKS.md).
pub(super) const PREFETCH_BYTES: usize = 2048;

/// Asks the cache for the lines of the `len` bytes at `p`, which may lie past the matrix (a prefetch never faults).
#[inline(always)]
pub(super) fn prefetch(p: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let mut i = 0;
        while i < len {
            // SAFETY: SSE is part of x86-64; a prefetch changes nothing the program sees.
            unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.wrapping_add(i).cast()) };
            i += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len);
}

/// One token's activations rounded to 16 bits, with the kernel that takes them, where `level` has one for one of
/// the matrix types `types`.
fn decode_16(
    level: Level,
    types: impl Iterator<Item = GgmlType> + Clone,
    x: &[f32],
) -> Option<(Activations16, Kernel16)> {
    let kernel: Kernel16 = match level {
        // SAFETY (all): the caller's, which `Level::current` (and `vnni`) checked.
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 if vnni(level) => super::simd_avx512::rows_dot_16_vnni,
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => super::simd_avx512::rows_dot_16,
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => super::simd_x86_16::rows_dot_16,
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Level::Simd128 => super::simd_wasm::rows_dot_16,
        Level::Portable => return None,
    };
    let mut types = types.filter(|&t| has_16bit_dot(level, t));
    // The AVX-512 Q4_1/Q5_1 kernels add the minimum lane by lane over pairs of x (`Activations16::pair_sum`); the
    // other kernels take each block's Σx.
    #[cfg(target_arch = "x86_64")]
    let pair_sums = level == Level::Avx512 && types.clone().any(|t| matches!(t, GgmlType::Q4_1 | GgmlType::Q5_1));
    #[cfg(not(target_arch = "x86_64"))]
    let pair_sums = false;
    types.next()?;
    Some((Activations16::new(x, pair_sums)?, kernel))
}

/// Whether decode over `ty` at `level` rounds the token to 16 bits ([`Activations16`]): every quantized type with
/// AVX-512 and simd128; with AVX2 alone, the types without a float32 kernel.
fn has_16bit_dot(level: Level, ty: GgmlType) -> bool {
    match level {
        Level::Portable => false,
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => super::simd_x86_16::has_dot(ty),
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => super::activations::has_16bit_dot(ty) || ty.interleaved(),
        #[allow(unreachable_patterns)]
        _ => super::activations::has_16bit_dot(ty),
    }
}

/// Fills `out` (`[rows][n]`) with the matmul, rows split across the pool natively. `x16`: the decode token
/// rounded to 16 bits and its kernel, used instead of `x` where given.
fn rows_parallel(
    w: &QMatrix,
    x: &[f32],
    n: usize,
    level: Level,
    x16: Option<&(Activations16, Kernel16)>,
    out: &mut [f32],
) {
    if out.is_empty() {
        return;
    }
    if w.cols == 0 {
        // Empty sums (and no chunks of zero columns to split x into).
        out.fill(0.0);
        return;
    }
    split_rows(w.rows, n, out, |first, out| {
        rows_kernel(w, x, n, level, x16, first, out)
    });
}

/// `f(first, rows)` over runs of whole rows of `out` (`[rows][n]`), `first` the index of a run's first row: split
/// across the pool natively.
#[cfg_attr(target_arch = "wasm32", allow(unused_variables))]
fn split_rows(rows: usize, n: usize, out: &mut [f32], f: impl Fn(usize, &mut [f32]) + Send + Sync) {
    #[cfg(not(target_arch = "wasm32"))]
    if !pool::single_threaded() {
        use rayon::prelude::*;
        pool::install(|| {
            let chunk = run_rows(rows);
            out.par_chunks_mut(chunk * n)
                .enumerate()
                .for_each(|(i, out)| f(i * chunk, out))
        });
        return;
    }
    f(0, out);
}

/// `f(first, count)` over runs of `count` rows from `first`, split across the pool like [`split_rows`].
#[cfg(target_arch = "x86_64")]
fn split_row_runs(rows: usize, f: impl Fn(usize, usize) + Send + Sync) {
    if !pool::single_threaded() {
        use rayon::prelude::*;
        pool::install(|| {
            let chunk = run_rows(rows);
            (0..rows.div_ceil(chunk))
                .into_par_iter()
                .for_each(|i| f(i * chunk, chunk.min(rows - i * chunk)))
        });
        return;
    }
    f(0, rows);
}

/// Rows per task in the pool: a few tasks per thread balance uneven progress; runs of whole prefill tiles.
#[cfg(not(target_arch = "wasm32"))]
fn run_rows(rows: usize) -> usize {
    rows.div_ceil(4 * rayon::current_num_threads())
        .max(MIN_TASK_ROWS)
        .next_multiple_of(MIN_TASK_ROWS)
}

/// Rows dequantized together for prefill.
const TILE: usize = 4;

/// Rows `first..` of the matmul into `out` (`[out.len() / n][n]`).
fn rows_kernel(
    w: &QMatrix,
    x: &[f32],
    n: usize,
    level: Level,
    x16: Option<&(Activations16, Kernel16)>,
    first: usize,
    out: &mut [f32],
) {
    if n == 1 {
        // The rows as one slice, split at a row length computed once, not per row (a division each).
        let row_bytes = w.row(0).len();
        let rows = &w.data[first * row_bytes..(first + out.len()) * row_bytes];
        if let Some((x16, kernel)) = x16 {
            // SAFETY: `decode_16` chose the kernel for this CPU, and `x16` rounds a token of `cols` values.
            unsafe { kernel(w.ty, rows, x16, out) };
            return;
        }
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        if level == Level::Simd128 && matches!(w.ty, GgmlType::F16 | GgmlType::BF16) {
            super::simd_wasm::rows_dot_float(w.ty, rows, x, out);
            return;
        }
        // Interleaved rows are not runs of bytes: the tiles below take them apart.
        if !w.ty.interleaved() {
            each_row(rows, out, |row| row_dot(level, w.ty, row, x));
            return;
        }
    }
    let cols = w.cols;
    let mut tile = vec![0.0; TILE * cols];
    for (i, out) in out.chunks_mut(TILE * n).enumerate() {
        let rows = out.len() / n;
        for (k, values) in tile.chunks_exact_mut(cols).take(rows).enumerate() {
            w.row_values(level, first + i * TILE + k, values);
        }
        if rows < TILE {
            for (t, x) in x.chunks_exact(cols).enumerate() {
                for k in 0..rows {
                    out[k * n + t] = dot(level, &tile[k * cols..(k + 1) * cols], x);
                }
            }
            continue;
        }
        let w4: [&[f32]; TILE] = std::array::from_fn(|k| &tile[k * cols..(k + 1) * cols]);
        // Tokens in pairs (each weight load serves two), then the odd one.
        let mut pairs = x.chunks_exact(2 * cols);
        for (p, x01) in pairs.by_ref().enumerate() {
            let (x0, x1) = x01.split_at(cols);
            for (j, ys) in dot4x2(level, w4, x0, x1).into_iter().enumerate() {
                for (k, v) in ys.into_iter().enumerate() {
                    out[k * n + 2 * p + j] = v;
                }
            }
        }
        if !pairs.remainder().is_empty() {
            for (k, v) in dot4(level, w4, pairs.remainder()).into_iter().enumerate() {
                out[k * n + n - 1] = v;
            }
        }
    }
}

/// Elements dequantized at a time on the generic path: a multiple of every block length.
const GROUP: usize = 256;

/// The dot of one stored row with `x`.
fn row_dot(level: Level, ty: GgmlType, row: &[u8], x: &[f32]) -> f32 {
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Level::Avx2 and Level::Avx512 mean the CPU has AVX2, FMA and F16C.
        Level::Avx2 | Level::Avx512 => {
            if let Some(v) = unsafe { super::simd_x86::row_dot(ty, row, x) } {
                return v;
            }
        }
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Level::Simd128 => {
            if let Some(v) = super::simd_wasm::row_dot(ty, row, x) {
                return v;
            }
        }
        Level::Portable => {}
    }
    // Generic: a group of blocks dequantized to the stack, then a float32 dot.
    let per_group = GROUP / ty.block_len();
    let mut buf = [0.0; GROUP];
    let mut sum = 0.0;
    for (bytes, x) in row.chunks(per_group * ty.block_bytes()).zip(x.chunks(GROUP)) {
        let values = &mut buf[..x.len()];
        for (block, out) in bytes
            .chunks_exact(ty.block_bytes())
            .zip(values.chunks_exact_mut(ty.block_len()))
        {
            blocks::dequantize_block(ty, block, out);
        }
        sum += dot(level, values, x);
    }
    sum
}

/// Whole blocks to float32 (`ty` can compute, `out` holds the blocks' values), with the SIMD kernel where there
/// is one: bit-identical either way.
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
pub(super) fn dequantize_blocks(level: Level, ty: GgmlType, bytes: &[u8], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: Level::Avx2 and Level::Avx512 mean the CPU has AVX2, FMA and F16C.
    if matches!(level, Level::Avx2 | Level::Avx512) && unsafe { super::simd_x86::dequantize(ty, bytes, out) } {
        return;
    }
    for (block, out) in bytes
        .chunks_exact(ty.block_bytes())
        .zip(out.chunks_exact_mut(ty.block_len()))
    {
        blocks::dequantize_block(ty, block, out);
    }
}

/// `Σ a[i]·b[i]` in float32.
fn dot(level: Level, a: &[f32], b: &[f32]) -> f32 {
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Level::Avx2 and Level::Avx512 mean the CPU has AVX2, FMA and F16C.
        Level::Avx2 | Level::Avx512 => unsafe { super::simd_x86::dot(a, b) },
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Level::Simd128 => super::simd_wasm::dot(a, b),
        Level::Portable => portable_dot(a, b),
    }
}

/// Four rows dotted with one `x` (each loaded once).
fn dot4(level: Level, w: [&[f32]; TILE], x: &[f32]) -> [f32; TILE] {
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Level::Avx2 and Level::Avx512 mean the CPU has AVX2, FMA and F16C.
        Level::Avx2 | Level::Avx512 => unsafe { super::simd_x86::dot4(w, x) },
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Level::Simd128 => super::simd_wasm::dot4(w, x),
        Level::Portable => w.map(|w| portable_dot(w, x)),
    }
}

/// Four rows dotted with two tokens' `x` (each weight loaded once for both).
fn dot4x2(level: Level, w: [&[f32]; TILE], x0: &[f32], x1: &[f32]) -> [[f32; TILE]; 2] {
    match level {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Level::Avx512 means the CPU has AVX-512 F and BW and F16C.
        Level::Avx512 => unsafe { super::simd_avx512::dot4x2(w, x0, x1) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Level::Avx2 means the CPU has AVX2, FMA and F16C.
        Level::Avx2 => unsafe { super::simd_x86::dot4x2(w, x0, x1) },
        _ => [dot4(level, w, x0), dot4(level, w, x1)],
    }
}

/// Eight running sums (independent chains the compiler can keep in registers or vectorize).
fn portable_dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let (a8, a_tail) = a.split_at(a.len() / 8 * 8);
    let (b8, b_tail) = b.split_at(a8.len());
    for (a, b) in a8.chunks_exact(8).zip(b8.chunks_exact(8)) {
        for k in 0..8 {
            acc[k] += a[k] * b[k];
        }
    }
    let tail: f32 = a_tail.iter().zip(b_tail).map(|(a, b)| a * b).sum();
    acc.iter().sum::<f32>() + tail
}
