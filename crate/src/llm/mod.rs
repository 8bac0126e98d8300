pub mod template;
pub mod tokenizer;
