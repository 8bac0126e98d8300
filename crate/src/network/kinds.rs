//! Layer types, activations and softmax variants with Loom's strings (spec §6.1).

use crate::error::{LoomError, Result};

macro_rules! named_enum {
    ($(#[$m:meta])* $name:ident, $kind:literal { $($variant:ident = $text:literal),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),+ }

        impl $name {
            /// Every variant, in Loom's id order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The string Loom writes.
            pub fn name(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

named_enum!(
    /// A Loom layer type; the variant order is Loom's id order (0–19).
    LayerType, "layer type" {
        Dense = "Dense",
        MultiHeadAttention = "MultiHeadAttention",
        SwiGLU = "SwiGLU",
        RMSNorm = "RMSNorm",
        CNN1 = "CNN1",
        CNN2 = "CNN2",
        CNN3 = "CNN3",
        RNN = "RNN",
        LSTM = "LSTM",
        LayerNorm = "LayerNorm",
        ConvTransposed1D = "ConvTransposed1D",
        ConvTransposed2D = "ConvTransposed2D",
        ConvTransposed3D = "ConvTransposed3D",
        Embedding = "Embedding",
        KMeans = "KMeans",
        Softmax = "Softmax",
        Parallel = "Parallel",
        Sequential = "Sequential",
        Residual = "Residual",
        Metacognition = "Metacognition",
    }
);

impl LayerType {
    /// Parses a type string case-insensitively with Loom's aliases. An empty string is Loom's default, Dense;
    /// an unknown one is refused (Loom would silently read it as Dense).
    pub fn parse(s: &str) -> Result<LayerType> {
        if s.is_empty() {
            return Ok(LayerType::Dense);
        }
        let upper = s.to_ascii_uppercase();
        let alias = match upper.as_str() {
            "MHA" | "ATTENTION" => Some(LayerType::MultiHeadAttention),
            "META" => Some(LayerType::Metacognition),
            _ => None,
        };
        alias
            .or_else(|| {
                LayerType::ALL
                    .iter()
                    .copied()
                    .find(|t| t.name().eq_ignore_ascii_case(s))
            })
            .ok_or_else(|| LoomError::UnknownName {
                kind: "layer type",
                name: s.to_string(),
            })
    }

    /// The entity writer keeps `seq_length: 1` only for these types (spec §8).
    pub fn keeps_unit_seq_length(self) -> bool {
        matches!(self, LayerType::MultiHeadAttention | LayerType::RNN | LayerType::LSTM)
    }
}

named_enum!(
    /// An activation function.
    Activation, "activation" {
        ReLU = "ReLU",
        Silu = "Silu",
        GELU = "GELU",
        Tanh = "Tanh",
        Sigmoid = "Sigmoid",
        LeakyReLU = "LeakyReLU",
        ReLU2 = "ReLU2",
        Linear = "Linear",
    }
);

impl Activation {
    /// Parses as Loom v0.80 does: case-insensitive; empty means Linear; "ReLU2" is not recognised by v0.80 and
    /// becomes Linear (documented Loom behaviour, kept for bit-exactness); anything else is refused.
    pub fn parse(s: &str) -> Result<Activation> {
        let a = match s.to_ascii_uppercase().as_str() {
            "RELU" => Activation::ReLU,
            "SILU" => Activation::Silu,
            "GELU" => Activation::GELU,
            "TANH" => Activation::Tanh,
            "SIGMOID" => Activation::Sigmoid,
            "LEAKYRELU" | "LEAKY_RELU" => Activation::LeakyReLU,
            "LINEAR" | "" | "RELU2" => Activation::Linear,
            _ => {
                return Err(LoomError::UnknownName {
                    kind: "activation",
                    name: s.to_string(),
                })
            }
        };
        Ok(a)
    }
}

named_enum!(
    /// A softmax variant.
    SoftmaxType, "softmax type" {
        Standard = "Standard",
        Grid = "Grid",
        Hierarchical = "Hierarchical",
        Temperature = "Temperature",
        Gumbel = "Gumbel",
        Masked = "Masked",
        Sparse = "Sparse",
        Adaptive = "Adaptive",
        Mixture = "Mixture",
        Entmax = "Entmax",
    }
);

impl SoftmaxType {
    /// Parses a persistence-JSON string: exact and case-sensitive, as in Loom; empty means Standard.
    pub fn parse(s: &str) -> Result<SoftmaxType> {
        if s.is_empty() {
            return Ok(SoftmaxType::Standard);
        }
        SoftmaxType::ALL
            .iter()
            .copied()
            .find(|t| t.name() == s)
            .ok_or_else(|| LoomError::UnknownName {
                kind: "softmax type",
                name: s.to_string(),
            })
    }

    /// The architecture JSON's integer form (Loom's id order).
    pub fn from_id(id: i64) -> Result<SoftmaxType> {
        usize::try_from(id)
            .ok()
            .and_then(|i| SoftmaxType::ALL.get(i).copied())
            .ok_or_else(|| LoomError::UnknownName {
                kind: "softmax type",
                name: id.to_string(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsing_follows_loom() {
        assert_eq!(LayerType::parse("mha").unwrap(), LayerType::MultiHeadAttention);
        assert_eq!(LayerType::parse("cnn2").unwrap(), LayerType::CNN2);
        assert_eq!(LayerType::parse("").unwrap(), LayerType::Dense);
        assert!(LayerType::parse("Convolution").is_err());
        assert_eq!(Activation::parse("leaky_relu").unwrap(), Activation::LeakyReLU);
        assert_eq!(Activation::parse("ReLU2").unwrap(), Activation::Linear);
        assert!(Activation::parse("swish").is_err());
        assert!(SoftmaxType::parse("grid").is_err());
        assert_eq!(SoftmaxType::from_id(9).unwrap(), SoftmaxType::Entmax);
    }
}
