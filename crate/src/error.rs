//! One typed error for every fallible operation in the crate.
use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum LoomError {
    #[error("i/o error: {0}")]
    Io(String),
    #[error("truncated input: {what} needs {needed} bytes, only {available} available")]
    Truncated { what: String, needed: u64, available: u64 },
    #[error("not a {format} file: bad magic bytes")]
    BadMagic { format: &'static str },
    #[error("unsupported {format} version {version}")]
    UnsupportedVersion { format: &'static str, version: u64 },
    #[error("{what} of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge { what: String, len: u64, max: u64 },
    #[error("invalid JSON in {context}: {message}")]
    Json { context: String, message: String },
    #[error("unknown dtype \"{0}\"")]
    UnknownDType(String),
    #[error("unsupported dtype: {0}")]
    UnsupportedDType(String),
    #[error("unknown {kind} \"{name}\"")]
    UnknownName { kind: &'static str, name: String },
    #[error("blob {path}: bytes {offset}..{end} lie outside the payload of {payload} bytes")]
    BlobOutOfRange {
        path: String,
        offset: u64,
        end: u64,
        payload: u64,
    },
    #[error("blobs {first} and {second} overlap")]
    BlobOverlap { first: String, second: String },
    #[error("blob {path}: {dtype} weights for {count} elements need {expected} bytes, found {actual}")]
    BlobLength {
        path: String,
        dtype: String,
        count: u64,
        expected: u64,
        actual: u64,
    },
    #[error("bad blob path \"{0}\"")]
    BadBlobPath(String),
    #[error("invalid scale {scale} for {path}")]
    InvalidScale { path: String, scale: f32 },
    #[error("shape {shape:?} of {what} overflows")]
    ShapeOverflow { what: String, shape: Vec<u64> },
    #[error("invalid network: {0}")]
    InvalidNetwork(String),
    #[error("invalid input: {0}")]
    InvalidInput(String),
    #[error("cannot save: {0}")]
    Unsaveable(String),
    #[error("safetensors: {0}")]
    Safetensors(String),
    #[error("unrecognised file format ({0})")]
    UnknownFormat(String),
    #[error("unsupported: {0}")]
    Unsupported(String),
    #[error("lossy conversion refused: {0}")]
    Lossy(String),
    #[error("no GPU: {0}")]
    NoGpu(String),
    #[error("GPU device lost: {0}")]
    GpuDeviceLost(String),
    #[error("GPU out of memory: {0}")]
    GpuOutOfMemory(String),
    #[error("GPU error: {0}")]
    Gpu(String),
    /// A kernel gave other values than its CPU twin at open ([`crate::llm::gpu_engine::GpuEngine::self_test`]).
    #[error("GPU self-test failed: {0}")]
    GpuSelfTest(String),
    #[error("GGUF: {0}")]
    Gguf(String),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    Template(String),
    /// A conversation longer than the model's context (or than the caller allowed).
    #[error("context full: {needed} tokens needed, the model holds {limit}")]
    ContextFull { needed: usize, limit: usize },
    /// A prefix of a larger file ended too early: call again with at least the first `needed` bytes.
    #[error("need the first {needed} bytes of the file, have {available}")]
    NeedMore { needed: u64, available: u64 },
    /// A saved chat whose bytes are damaged or contradict themselves.
    #[error("saved chat: {0}")]
    SavedChat(String),
    /// A saved chat (or other state) that belongs to another model.
    #[error("{0}")]
    ModelMismatch(String),
    /// An error in a file a person picked or named, with the file's name (its code is the error's own).
    #[error("{file}: {error}")]
    InFile { file: String, error: Box<LoomError> },
}

impl LoomError {
    /// A stable short code per kind of error, for callers that branch on it (the JavaScript bindings throw
    /// `{code, message}`).
    pub fn code(&self) -> &'static str {
        match self {
            LoomError::Io(_) => "io",
            LoomError::Truncated { .. }
            | LoomError::BadMagic { .. }
            | LoomError::TooLarge { .. }
            | LoomError::Json { .. }
            | LoomError::BlobOutOfRange { .. }
            | LoomError::BlobOverlap { .. }
            | LoomError::BlobLength { .. }
            | LoomError::BadBlobPath(_)
            | LoomError::InvalidScale { .. }
            | LoomError::ShapeOverflow { .. }
            | LoomError::Safetensors(_)
            | LoomError::Gguf(_)
            | LoomError::Tokenizer(_)
            | LoomError::SavedChat(_)
            | LoomError::UnknownFormat(_) => "bad_format",
            LoomError::UnknownDType(_) | LoomError::UnsupportedDType(_) => "unsupported_dtype",
            LoomError::UnsupportedVersion { .. }
            | LoomError::UnknownName { .. }
            | LoomError::Unsaveable(_)
            | LoomError::Unsupported(_) => "unsupported",
            LoomError::InvalidNetwork(_) => "invalid_network",
            LoomError::InvalidInput(_) => "invalid_input",
            LoomError::Lossy(_) => "lossy",
            LoomError::NoGpu(_) => "no_webgpu",
            LoomError::GpuDeviceLost(_) => "device_lost",
            LoomError::GpuOutOfMemory(_) => "out_of_memory",
            LoomError::Gpu(_) => "gpu",
            LoomError::GpuSelfTest(_) => "gpu_self_test",
            LoomError::NeedMore { .. } => "need_more",
            LoomError::Template(_) => "template",
            LoomError::ContextFull { .. } => "context_full",
            LoomError::ModelMismatch(_) => "model_mismatch",
            LoomError::InFile { error, .. } => error.code(),
        }
    }

    /// The error as one in file `file` (named once, however often this is called).
    pub fn in_file(self, file: &str) -> LoomError {
        match self {
            LoomError::InFile { .. } => self,
            error => LoomError::InFile {
                file: file.to_string(),
                error: Box::new(error),
            },
        }
    }
}

impl From<std::io::Error> for LoomError {
    fn from(e: std::io::Error) -> Self {
        LoomError::Io(e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, LoomError>;

pub(crate) fn json_err(context: &str, e: impl std::fmt::Display) -> LoomError {
    LoomError::Json {
        context: context.to_string(),
        message: e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_by_kind() {
        let cases = [
            (LoomError::BadMagic { format: "ENTITY" }, "bad_format"),
            (
                LoomError::Truncated {
                    what: "x".into(),
                    needed: 9,
                    available: 8,
                },
                "bad_format",
            ),
            (LoomError::UnknownFormat("x".into()), "bad_format"),
            (json_err("header", "eof"), "bad_format"),
            (
                LoomError::BlobOutOfRange {
                    path: "layers.0".into(),
                    offset: 0,
                    end: 9,
                    payload: 8,
                },
                "bad_format",
            ),
            (LoomError::Gguf("x".into()), "bad_format"),
            (LoomError::Tokenizer("x".into()), "bad_format"),
            (LoomError::Template("x".into()), "template"),
            (LoomError::SavedChat("x".into()), "bad_format"),
            (LoomError::ModelMismatch("x".into()), "model_mismatch"),
            (LoomError::UnknownDType("int3".into()), "unsupported_dtype"),
            (LoomError::UnsupportedDType("Q6_K".into()), "unsupported_dtype"),
            (
                LoomError::UnsupportedVersion {
                    format: "GGUF",
                    version: 1,
                },
                "unsupported",
            ),
            (LoomError::Unsupported("x".into()), "unsupported"),
            (LoomError::InvalidInput("x".into()), "invalid_input"),
            (LoomError::InvalidNetwork("x".into()), "invalid_network"),
            (LoomError::Lossy("x".into()), "lossy"),
            (LoomError::NoGpu("x".into()), "no_webgpu"),
            (LoomError::GpuDeviceLost("x".into()), "device_lost"),
            (LoomError::GpuOutOfMemory("x".into()), "out_of_memory"),
            (LoomError::Gpu("x".into()), "gpu"),
            (LoomError::GpuSelfTest("x".into()), "gpu_self_test"),
            (
                LoomError::NeedMore {
                    needed: 100,
                    available: 10,
                },
                "need_more",
            ),
            (LoomError::Io("x".into()), "io"),
            (LoomError::ContextFull { needed: 9, limit: 8 }, "context_full"),
        ];
        for (e, code) in cases {
            assert_eq!(e.code(), code, "{e}");
        }
    }
}
