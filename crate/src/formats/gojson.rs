//! A JSON writer that reproduces Go's `encoding/json` output byte for byte (spec §5.1): `MarshalIndent` with a
//! two-space indent or compact `Marshal`, Go string escaping and Go float formatting.

use crate::error::{LoomError, Result};

/// Formats a float as Go's JSON encoder does for a field of 32 or 64 bits; `None` for NaN and ±Inf, which Go
/// refuses to encode.
pub fn format_float(x: f64, bits32: bool) -> Option<String> {
    if !x.is_finite() {
        return None;
    }
    let abs = x.abs();
    let exponent_form = abs != 0.0
        && if bits32 {
            let a = abs as f32;
            !(1e-6..1e21).contains(&a)
        } else {
            !(1e-6..1e21).contains(&abs)
        };
    if !exponent_form {
        return Some(if bits32 {
            format!("{}", x as f32)
        } else {
            format!("{x}")
        });
    }
    let sci = if bits32 {
        format!("{:e}", x as f32)
    } else {
        format!("{x:e}")
    };
    let (mantissa, exp) = sci.split_once('e')?;
    let exp: i32 = exp.parse().ok()?;
    // Go writes at least two exponent digits, then strips the zero of `e-0d`; positive ones keep `+` and both.
    Some(if exp < 0 {
        format!("{mantissa}e-{}", -exp)
    } else {
        format!("{mantissa}e+{exp:02}")
    })
}

/// Appends `s` as a Go JSON string literal.
pub fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Streaming writer for Go-formatted JSON.
pub struct GoJson {
    out: String,
    pretty: bool,
    /// One entry per open container: how many members it has so far.
    counts: Vec<usize>,
    after_key: bool,
}

impl GoJson {
    /// `pretty` = `MarshalIndent(v, "", "  ")`, else compact `Marshal`.
    pub fn new(pretty: bool) -> GoJson {
        GoJson {
            out: String::new(),
            pretty,
            counts: Vec::new(),
            after_key: false,
        }
    }

    /// The text written so far.
    pub fn finish(self) -> String {
        self.out
    }

    fn newline(&mut self) {
        if self.pretty {
            self.out.push('\n');
            for _ in 0..self.counts.len() {
                self.out.push_str("  ");
            }
        }
    }

    /// Separator before a member or array element.
    fn before_value(&mut self) {
        if self.after_key {
            self.after_key = false;
            return;
        }
        if let Some(n) = self.counts.last_mut() {
            if *n > 0 {
                self.out.push(',');
            }
            *n += 1;
            self.newline();
        }
    }

    fn open(&mut self, c: char) {
        self.before_value();
        self.out.push(c);
        self.counts.push(0);
    }

    fn close(&mut self, c: char) {
        let n = self.counts.pop().unwrap_or(0);
        if n > 0 {
            self.newline();
        }
        self.out.push(c);
    }

    pub fn begin_object(&mut self) {
        self.open('{');
    }

    pub fn end_object(&mut self) {
        self.close('}');
    }

    pub fn begin_array(&mut self) {
        self.open('[');
    }

    pub fn end_array(&mut self) {
        self.close(']');
    }

    /// Starts an object member.
    pub fn key(&mut self, k: &str) {
        self.before_value();
        write_string(&mut self.out, k);
        self.out.push(':');
        if self.pretty {
            self.out.push(' ');
        }
        self.after_key = true;
    }

    pub fn string(&mut self, s: &str) {
        self.before_value();
        write_string(&mut self.out, s);
    }

    pub fn int(&mut self, v: i64) {
        self.before_value();
        self.out.push_str(&v.to_string());
    }

    pub fn bool(&mut self, v: bool) {
        self.before_value();
        self.out.push_str(if v { "true" } else { "false" });
    }

    pub fn null(&mut self) {
        self.before_value();
        self.out.push_str("null");
    }

    /// A float field; `bits32` selects float32 formatting. NaN and ±Inf cannot be saved, as in Go.
    pub fn float(&mut self, v: f64, bits32: bool, field: &str) -> Result<()> {
        let s = format_float(v, bits32)
            .ok_or_else(|| LoomError::Unsaveable(format!("{field} is {v}, which JSON cannot hold")))?;
        self.before_value();
        self.out.push_str(&s);
        Ok(())
    }

    /// Writes pre-rendered JSON text as a value (used for base64 payloads that are already strings).
    pub fn raw(&mut self, text: &str) {
        self.before_value();
        self.out.push_str(text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_match_go() {
        let f = |x: f64| format_float(x, false).unwrap();
        let g = |x: f32| format_float(f64::from(x), true).unwrap();
        assert_eq!(f(1.0), "1");
        assert_eq!(f(-0.0), "-0");
        assert_eq!(f(1e-7), "1e-7");
        assert_eq!(f(1.5e-10), "1.5e-10");
        assert_eq!(f(1e21), "1e+21");
        assert_eq!(f(1e20), "100000000000000000000");
        assert_eq!(f(12345678912345678.0), "12345678912345678");
        assert_eq!(f(0.000001), "0.000001");
        assert_eq!(g(0.085275225), "0.085275225");
        assert_eq!(g(1e-7), "1e-7");
        assert_eq!(g(0.0006697036), "0.0006697036");
        assert_eq!(format_float(f64::NAN, true), None);
    }

    #[test]
    fn strings_match_go() {
        let mut s = String::new();
        write_string(&mut s, "a\"b\\<&>\u{1}\u{8}\u{2028}é/\n");
        assert_eq!(s, r#""a\"b\\\u003c\u0026\u003e\u0001\b\u2028é/\n""#);
    }

    #[test]
    fn indentation_matches_marshal_indent() {
        let mut w = GoJson::new(true);
        w.begin_object();
        w.key("a");
        w.int(1);
        w.key("b");
        w.begin_array();
        w.end_array();
        w.key("c");
        w.begin_array();
        w.begin_object();
        w.key("d");
        w.bool(true);
        w.end_object();
        w.end_array();
        w.end_object();
        assert_eq!(
            w.finish(),
            "{\n  \"a\": 1,\n  \"b\": [],\n  \"c\": [\n    {\n      \"d\": true\n    }\n  ]\n}"
        );
    }
}
