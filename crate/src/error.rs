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
