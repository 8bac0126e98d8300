//! The grammar module's JavaScript bindings: the package's worker builds a [`GrammarVocab`] from the chat module's
//! token bytes once per model, starts a [`Grammar`] per constrained reply, and before each step hands its mask
//! (a bitmask over the vocabulary) to the chat module, then the drawn id back here.

use wasm_bindgen::prelude::*;

use super::{Constraint, Error};

fn js_error(e: Error) -> JsValue {
    js_sys::Error::new(&e.0).into()
}

/// A reader of the packed vocabulary.
struct Packed<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Packed<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], JsValue> {
        let part = self
            .bytes
            .get(self.at..self.at.saturating_add(n))
            .ok_or_else(|| js_error(Error("the packed vocabulary is cut short".into())))?;
        self.at += n;
        Ok(part)
    }

    fn count(&mut self) -> Result<usize, JsValue> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")) as usize)
    }
}

/// A model's vocabulary as the grammar engine sees it.
#[wasm_bindgen]
pub struct GrammarVocab(super::Vocab);

#[wasm_bindgen]
impl GrammarVocab {
    /// The vocabulary the chat module's `grammarWords()` packs: little-endian u32s `rows`, the count of end ids,
    /// those ids, then each row's id as its length and bytes.
    #[wasm_bindgen(constructor)]
    pub fn new(packed: &[u8]) -> Result<GrammarVocab, JsValue> {
        let mut p = Packed { bytes: packed, at: 0 };
        let rows = p.count()?;
        let n_eos = p.count()?;
        let eos = (0..n_eos)
            .map(|_| p.count().map(|id| id as u32))
            .collect::<Result<Vec<u32>, _>>()?;
        let mut words = Vec::with_capacity(rows);
        for _ in 0..rows {
            let n = p.count()?;
            words.push(p.take(n)?.to_vec());
        }
        super::Vocab::new(words, rows, &eos).map(GrammarVocab).map_err(js_error)
    }

    /// A grammar for one reply: `kind` is `json_schema`, `json_object`, `regex` or `lark`, `source` its text.
    pub fn start(&self, kind: &str, source: &str) -> Result<Grammar, JsValue> {
        let c = Constraint::parse(kind, source).map_err(js_error)?;
        self.0.start(&c).map(Grammar).map_err(js_error)
    }
}

/// One reply's grammar state.
#[wasm_bindgen]
pub struct Grammar(super::Grammar);

#[wasm_bindgen]
impl Grammar {
    /// The ids allowed next: bit `id % 32` of word `id / 32`.
    pub fn mask(&mut self) -> Result<Vec<u32>, JsValue> {
        self.0.mask_words().map_err(js_error)
    }

    /// Takes the id that was drawn.
    pub fn accept(&mut self, id: u32) -> Result<(), JsValue> {
        self.0.accept(id).map_err(js_error)
    }

    /// The grammar is complete: the reply ends here.
    #[wasm_bindgen(js_name = isDone)]
    pub fn is_done(&self) -> bool {
        self.0.is_done()
    }
}

/// Bytes of WebAssembly memory this module holds (its high-water mark: wasm memory never shrinks).
#[wasm_bindgen(js_name = memoryBytes)]
pub fn memory_bytes() -> f64 {
    (core::arch::wasm32::memory_size(0) as f64) * 65536.0
}
