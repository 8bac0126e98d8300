//! Constrained decoding natively: [`loom_grammar`] (llguidance) over this crate's tokenizer. A reply held to a
//! JSON Schema, any JSON object, a regular expression or a Lark grammar has every id the grammar does not allow
//! next set to −∞ before the draw, and ends where the grammar is complete. (In the browser the same library is a
//! WebAssembly module of its own that the package drives: see `grammar/`.)

pub use loom_grammar::Constraint;

use crate::error::{LoomError, Result};

fn constraint_err(e: loom_grammar::Error) -> LoomError {
    LoomError::InvalidInput(format!("constraint: {e}"))
}

/// A tokenizer's vocabulary as the grammar engine sees it: built once per model and shared by every constrained
/// reply.
#[derive(Clone)]
pub struct GrammarVocab(loom_grammar::Vocab);

impl GrammarVocab {
    /// The vocabulary whose id `i` is `words[i]` ([`super::tokenizer::Tokenizer::token_bytes`]) over the model's
    /// `rows` logits, ending at any of `eos_ids`.
    pub fn new(words: Vec<Vec<u8>>, rows: usize, eos_ids: &[u32]) -> Result<GrammarVocab> {
        loom_grammar::Vocab::new(words, rows, eos_ids)
            .map(GrammarVocab)
            .map_err(constraint_err)
    }

    /// A grammar for one reply: what it cannot compile is an error now, before any token is generated.
    pub fn start(&self, c: &Constraint) -> Result<Grammar> {
        self.0.start(c).map(Grammar).map_err(constraint_err)
    }
}

/// One reply's grammar state.
pub struct Grammar(loom_grammar::Grammar);

impl Grammar {
    /// The ids the grammar allows next: bit `id % 32` of word `id / 32`, over the model's rows.
    pub fn mask_words(&mut self) -> Result<Vec<u32>> {
        self.0.mask_words().map_err(constraint_err)
    }

    /// Takes the id that was drawn.
    pub fn accept(&mut self, id: u32) -> Result<()> {
        self.0.accept(id).map_err(constraint_err)
    }

    /// The grammar is complete and allows nothing more.
    pub fn is_done(&self) -> bool {
        self.0.is_done()
    }
}
