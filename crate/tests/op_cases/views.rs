//! What the ops read and write are [`Rows`] views: an op refuses a view that does not fit its buffer, whose shape
//! disagrees with the op's, or that its kernel cannot address, with a typed error before it records anything; and a
//! strided view (columns of a fused q|k|v row, as the decoder uses) gives exactly what the same values packed give.

use loom_wasm::error::{LoomError, Result};
use loom_wasm::gpu::{
    AttendArgs, Attention, Elementwise, Gpu, KvCache, MatVec, NewKv, Norm, PackedWeights, Pointwise, Recorder, Rope,
    Rows,
};
use loom_wasm::network::f32_bytes;

use super::harness::data;
use super::{output, upload};

on_each_device!(
    ops_refuse_views_that_do_not_fit,
    a_strided_view_equals_the_packed_values
);

fn refused(what: &str, result: Result<()>) {
    match result {
        Err(LoomError::InvalidInput(message)) => note!("{what}: {message}"),
        other => panic!("{what}: expected an InvalidInput error, got {other:?}"),
    }
}

pub async fn ops_refuse_views_that_do_not_fit(gpu: &Gpu) {
    let (norm, ew, att) = (
        Norm::new(gpu).unwrap(),
        Elementwise::new(gpu).unwrap(),
        Attention::new(gpu).unwrap(),
    );
    let mv = MatVec::f32(gpu).unwrap();
    let (b16, b32) = (output(gpu, "16", 16).await, output(gpu, "32", 32).await);
    let gamma = upload(gpu, "gamma", &[1.0; 8]).await;
    let w = PackedWeights::upload(gpu, mv.packing(), &f32_bytes(&data(1, 32, -1.0, 1.0)), 1.0, 8, 4)
        .await
        .unwrap();
    let cache = KvCache::new(gpu, 1, 8, 4).await.unwrap();
    let args = AttendArgs {
        pos0: 0,
        scale: 1.0,
        window: 0,
        softcap: 0.0,
        split: false,
    };
    let eps = 1e-6;
    let mut rec = Recorder::new(gpu);

    refused(
        "overlapping rows",
        Rows {
            buffer: &b32,
            rows: 2,
            cols: 8,
            stride: 4,
            row0: 0,
            col0: 0,
        }
        .check("view"),
    );
    refused(
        "RMSNorm of 4 rows of 8 from 16 values",
        norm.encode_rms(&mut rec, Rows::new(&b16, 4, 8), &gamma, Rows::new(&b32, 4, 8), 1, eps),
    );
    refused(
        "RMSNorm of 4×8 into 2×16",
        norm.encode_rms(&mut rec, Rows::new(&b32, 4, 8), &gamma, Rows::new(&b32, 2, 16), 1, eps),
    );
    refused(
        "RMSNorm of rows of 16 with a γ of 8",
        norm.encode_rms(&mut rec, Rows::new(&b32, 2, 16), &gamma, Rows::new(&b32, 2, 16), 1, eps),
    );
    refused(
        "RMSNorm of strided columns (its kernel reads packed rows)",
        norm.encode_rms(
            &mut rec,
            Rows::new(&b32, 2, 16).columns(0, 8),
            &gamma,
            Rows::new(&b16, 2, 8),
            1,
            eps,
        ),
    );
    refused(
        "a residual add of 32 values into 16",
        ew.encode_add(
            &mut rec,
            Rows::new(&b32, 1, 32),
            Rows::new(&b32, 1, 32),
            Rows::new(&b16, 1, 16),
        ),
    );
    refused(
        "a bias row of 3 over 16 values",
        ew.encode_add_inplace(&mut rec, Rows::new(&b16, 1, 16), Rows::new(&b32, 1, 3)),
    );
    refused(
        "an 8→4 matvec of rows of 16",
        mv.encode(
            &mut rec,
            Rows::new(&b32, 2, 16),
            &w,
            Rows::new(&b16, 2, 4),
            Pointwise::Identity,
        ),
    );
    refused(
        "an 8→4 matvec into rows of 8",
        mv.encode(
            &mut rec,
            Rows::new(&b32, 2, 8),
            &w,
            Rows::new(&b16, 2, 8),
            Pointwise::Identity,
        ),
    );
    refused(
        "a KV update whose K and V rows differ in stride",
        att.encode_kv_update(
            &mut rec,
            &cache,
            Rows::new(&b32, 2, 16).columns(0, 8),
            Rows::new(&b16, 2, 8),
            0,
        ),
    );
    refused(
        "a KV update of rows wider than the cache's",
        att.encode_kv_update(&mut rec, &cache, Rows::new(&b32, 2, 16), Rows::new(&b32, 2, 16), 0),
    );
    refused(
        "attention of queries that start past column 0",
        att.encode_attend(
            &mut rec,
            &cache,
            Rows::new(&b32, 2, 16).columns(8, 8),
            None,
            Rows::new(&b16, 2, 8),
            args,
        ),
    );
    refused(
        "attention of 2 query rows into 1",
        att.encode_attend(
            &mut rec,
            &cache,
            Rows::new(&b16, 2, 8),
            None,
            Rows::new(&b32, 1, 8),
            args,
        ),
    );
    refused(
        "attention writing K rows wider than the cache's",
        att.encode_attend(
            &mut rec,
            &cache,
            Rows::new(&b16, 2, 8),
            Some(NewKv {
                k: Rows::new(&b32, 2, 16),
                v: Rows::new(&b32, 2, 16),
                rope: None,
            }),
            Rows::new(&b16, 2, 8),
            args,
        ),
    );
    rec.submit();
}

/// RoPE and the KV update through columns of strided rows (q|k|v side by side, then two values of padding) against
/// the same values packed: identical, and the columns outside the view untouched.
pub async fn a_strided_view_equals_the_packed_values(gpu: &Gpu) {
    let rope = Rope::new(gpu).unwrap();
    let att = Attention::new(gpu).unwrap();
    let (tokens, hd, q_heads, kv_heads) = (3u32, 8u32, 2u32, 1u32);
    let (q, kv) = (q_heads * hd, kv_heads * hd);
    let stride = q + 2 * kv + 2;
    let fused = data(3, (tokens * stride) as usize, -1.0, 1.0);
    let column = |c0: u32, cols: u32| -> Vec<f32> {
        fused
            .chunks(stride as usize)
            .flat_map(|row| row[c0 as usize..(c0 + cols) as usize].to_vec())
            .collect()
    };
    let (q_vals, k_vals, v_vals) = (column(0, q), column(q, kv), column(q + kv, kv));

    let fb = upload(gpu, "fused", &fused).await;
    let (qb, kb, vb) = (
        upload(gpu, "q", &q_vals).await,
        upload(gpu, "k", &k_vals).await,
        upload(gpu, "v", &v_vals).await,
    );
    let (fused_cache, cache) = (
        KvCache::new(gpu, kv_heads as usize, hd as usize, 8).await.unwrap(),
        KvCache::new(gpu, kv_heads as usize, hd as usize, 8).await.unwrap(),
    );
    let mut rec = Recorder::new(gpu);
    let table = rope.table(&mut rec, 10_000.0, hd as usize, 2, tokens as usize).unwrap();
    let rows = Rows::new(&fb, tokens, stride);
    // One dispatch turns q's and k's heads side by side, as the fused decoder does.
    rope.encode(&mut rec, rows.columns(0, q + kv), &table.buffer, hd)
        .unwrap();
    rope.encode(&mut rec, Rows::new(&qb, tokens, q), &table.buffer, hd)
        .unwrap();
    rope.encode(&mut rec, Rows::new(&kb, tokens, kv), &table.buffer, hd)
        .unwrap();
    let (k_cols, v_cols) = (rows.columns(q, kv), rows.columns(q + kv, kv));
    att.encode_kv_update(&mut rec, &fused_cache, k_cols, v_cols, 2).unwrap();
    let (k_rows, v_rows) = (Rows::new(&kb, tokens, kv), Rows::new(&vb, tokens, kv));
    att.encode_kv_update(&mut rec, &cache, k_rows, v_rows, 2).unwrap();
    rec.submit();

    let got = gpu.read_f32(&fb).await.unwrap();
    let got_q = gpu.read_f32(&qb).await.unwrap();
    let got_k = gpu.read_f32(&kb).await.unwrap();
    for (t, row) in got.chunks(stride as usize).take(tokens as usize).enumerate() {
        let (t, q, kv) = (t, q as usize, kv as usize);
        assert_eq!(row[..q], got_q[t * q..(t + 1) * q], "q of token {t}");
        assert_eq!(row[q..q + kv], got_k[t * kv..(t + 1) * kv], "k of token {t}");
        let untouched = &fused[t * stride as usize + q + kv..(t + 1) * stride as usize];
        assert_eq!(row[q + kv..], *untouched, "v and padding of token {t}");
    }
    assert_ne!(got_q[..q as usize], q_vals[..q as usize], "RoPE turned nothing");
    let (fk, fv) = fused_cache.read(gpu).await.unwrap();
    let (k, v) = cache.read(gpu).await.unwrap();
    assert!(
        fk == k && fv == v,
        "KV cache from strided columns differs from the packed one"
    );
    note!("RoPE and KV update through strided columns: identical to the packed values");
}
