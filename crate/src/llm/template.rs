//! Chat templates: the Jinja templates shipped with LLM tokenizers, rendered as HF transformers'
//! `apply_chat_template` renders them with Python jinja2, on `minijinja`.
//!
//! The environment matches transformers': `trim_blocks` and `lstrip_blocks` on, no trailing newline kept, loop
//! controls (`{% break %}`, `{% continue %}`), the `{% generation %}` tag (rendered as plain content), globals
//! `raise_exception(msg)` and `strftime_now(fmt)`, and a `tojson` filter that writes what Python's `json.dumps`
//! writes. Python string, dict and list methods (`.strip()`, `.startswith()`, `.items()`, …) come from
//! `minijinja-contrib`'s pycompat. The template sees `messages`, `add_generation_prompt`, `bos_token`,
//! `eos_token`, and `tools` / `documents` as none (transformers passes them as `None`).
//!
//! A template cannot run away: every render has a fuel budget (instructions plus bytes produced, growing with
//! the size of the conversation), recursion is limited and the output is capped; all three are `template`
//! errors, as are compile errors and `raise_exception`. minijinja charges a serialized value to the fuel only
//! once its text exists, so the filters that serialize whole values (`tojson`, `string`, `pprint`) stop at the
//! output's cap themselves; `str.format` and the `format` filter are checked before minijinja formats (widths past
//! the cap, nested fields, and non-ASCII field keys, which run to their closing bracket, are errors). Walks inside
//! one instruction (comparing, hashing, formatting and flattening values that hold the same list many times over)
//! are charged to a work budget the size of the fuel by our patch of minijinja (`vendor/minijinja/PATCH.md`).

use std::collections::BTreeMap;
use std::io::Write;

use minijinja::syntax::SyntaxConfig;
use minijinja::value::{Kwargs, Rest, Value, ValueKind, ValueOrKwargs};
use minijinja::{Environment, Error, ErrorKind, State};

use crate::error::{LoomError, Result};

/// Fuel for any render: about a million instructions, or 64 MB of strings produced (minijinja charges one fuel
/// per instruction and per 64 bytes made). Real templates use a few thousand per message.
const BASE_FUEL: u64 = 1_000_000;
/// Extra fuel per byte of the conversation, so long conversations render: 1/8 fuel = 8 bytes made per byte in.
const FUEL_PER_INPUT_BYTES: u64 = 8;
/// Extra fuel per message for the instructions a template runs for each.
const FUEL_PER_MESSAGE: u64 = 2_000;
/// Deepest macro / include recursion: real templates nest a few levels, or one per level of a tool schema they
/// print with a recursive macro (Kimi K3's json_sorted).
const RECURSION_LIMIT: usize = 128;
/// Largest output: 4 MiB plus 8 bytes per byte of the conversation.
const BASE_OUTPUT: usize = 4 << 20;
const OUTPUT_PER_INPUT_BYTE: usize = 8;

const TEMPLATE_NAME: &str = "chat_template";

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, ts_rs::TS)]
pub struct ChatMessage {
    #[ts(type = "'system' | 'user' | 'assistant' | (string & {})")]
    pub role: String,
    pub content: String,
}

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    /// `strftime_now`'s instant in Unix seconds (UTC); `None` reads the clock.
    fixed_now: Option<i64>,
}

fn template_err(e: impl std::fmt::Display) -> LoomError {
    LoomError::Template(e.to_string())
}

/// A minijinja error with its cause chain (raise_exception's message sits in the first line).
fn render_err(e: &Error) -> LoomError {
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        msg.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    LoomError::Template(msg)
}

impl ChatTemplate {
    /// Compiles `source`; a syntax error is a `template` error.
    pub fn new(source: &str) -> Result<ChatTemplate> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(false)
            .build()
            .map_err(template_err)?;
        env.set_syntax(syntax);
        env.set_recursion_limit(RECURSION_LIMIT);
        env.add_function("raise_exception", raise_exception);
        env.add_test("iterable", is_iterable);
        env.add_template_owned(TEMPLATE_NAME, rewrite_generation_tags(source))
            .map_err(|e| render_err(&e))?;
        Ok(ChatTemplate { env, fixed_now: None })
    }

    /// Pins `strftime_now` to `unix_seconds` (UTC), for reproducible renders.
    pub fn with_fixed_now(mut self, unix_seconds: i64) -> ChatTemplate {
        self.fixed_now = Some(unix_seconds);
        self
    }

    /// Renders `messages`. `bos_token` / `eos_token` left `None` are undefined in the template, as when the
    /// tokenizer has none.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
        bos_token: Option<&str>,
        eos_token: Option<&str>,
    ) -> Result<String> {
        let messages: Vec<serde_json::Value> = messages
            .iter()
            .map(|m| serde_json::json!({"role": m.role, "content": m.content}))
            .collect();
        self.render_json(&messages, None, add_generation_prompt, bos_token, eos_token)
    }

    /// Renders messages given as JSON objects, as transformers' `apply_chat_template` passes them (an assistant's
    /// `tool_calls`, a tool result's `tool_call_id` and `name`), with `tools` (a list of tool schemas) when there are
    /// any.
    pub fn render_json(
        &self,
        messages: &[serde_json::Value],
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
        bos_token: Option<&str>,
        eos_token: Option<&str>,
    ) -> Result<String> {
        let size = |v: &serde_json::Value| v.to_string().len();
        let input_bytes: usize = messages.iter().map(size).sum::<usize>()
            + tools.map_or(0, size)
            + bos_token.map_or(0, str::len)
            + eos_token.map_or(0, str::len);
        let mut env = self.env.clone();
        let fuel = BASE_FUEL
            .saturating_add(input_bytes as u64 / FUEL_PER_INPUT_BYTES)
            .saturating_add((messages.len() as u64).saturating_mul(FUEL_PER_MESSAGE));
        env.set_fuel(Some(fuel));
        let now = self.fixed_now.unwrap_or_else(unix_now);
        env.add_function("strftime_now", move |format: &str| strftime(format, now));
        let limit = BASE_OUTPUT.saturating_add(input_bytes.saturating_mul(OUTPUT_PER_INPUT_BYTE));
        // These filters serialize whole values, which minijinja charges to the fuel only once the text exists:
        // a list holding the same list twice, nested 64 deep, prints 2^64 items. So they stop at the output's cap.
        env.add_filter("tojson", move |value: Value, kwargs: Kwargs| {
            tojson(value, kwargs, limit)
        });
        env.add_filter("string", move |value: Value| string_filter(&value, limit));
        env.add_filter("pprint", move |value: Value| pprint_filter(&value, limit));
        // Python string methods, but `str.format` checked first: minijinja pads to any width it is given
        // (`'{:999999999999}'.format(x)` allocates the width at once) and panics on a non-ASCII field key.
        // The printf-style `format` filter, checked first too: minijinja panics on a non-ASCII `%(key)`.
        env.add_filter(
            "format",
            |state: &mut State, value: Value, args: Rest<ValueOrKwargs>| -> std::result::Result<Value, Error> {
                if let Some(source) = value.as_str() {
                    check_printf_keys(source)?;
                }
                minijinja::filters::format(state, &value, args)
            },
        );
        env.set_unknown_method_callback(move |state, value, method, args| {
            if let (Some(source), "format") = (value.as_str(), method) {
                check_str_format(source, limit)?;
            }
            minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
        });

        let mut ctx: BTreeMap<&str, Value> = BTreeMap::new();
        ctx.insert("messages", messages.iter().map(json_value).collect());
        ctx.insert("add_generation_prompt", Value::from(add_generation_prompt));
        ctx.insert("tools", tools.map_or(Value::from(()), json_value));
        ctx.insert("documents", Value::from(()));
        if let Some(bos) = bos_token {
            ctx.insert("bos_token", Value::from(bos));
        }
        if let Some(eos) = eos_token {
            ctx.insert("eos_token", Value::from(eos));
        }
        let template = env.get_template(TEMPLATE_NAME).map_err(|e| render_err(&e))?;
        let mut out = CappedWriter { buf: Vec::new(), limit };
        template
            .render_captured_to(Value::from_pairs(ctx), &mut out)
            .map_err(|e| {
                if out.buf.len() >= limit {
                    LoomError::Template(format!("output exceeds {limit} bytes"))
                } else {
                    render_err(&e)
                }
            })?;
        String::from_utf8(out.buf).map_err(template_err)
    }
}

/// A JSON value as the template sees it (Python's dict and list, keys in their order).
fn json_value(v: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    match v {
        J::Null => Value::from(()),
        J::Bool(b) => Value::from(*b),
        J::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::from(i),
            (None, Some(u)) => Value::from(u),
            _ => Value::from(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => Value::from(s.as_str()),
        J::Array(a) => a.iter().map(json_value).collect(),
        J::Object(o) => Value::from_pairs(o.iter().map(|(k, v)| (k.as_str(), json_value(v)))),
    }
}

/// Refuses a `str.format` source whose replacement fields minijinja cannot format safely: a field holding a
/// non-ASCII character (its key parser slices bytes inside a character and panics), a field nested in a field
/// (`{:{}}` takes its width from an argument, unchecked), or a number in a field above `limit` (a width or
/// precision that would make a string past the output's cap).
fn check_str_format(source: &str, limit: usize) -> std::result::Result<(), Error> {
    let refuse = |why: &str| Err(Error::new(ErrorKind::InvalidOperation, format!("str.format: {why}")));
    let mut chars = source.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '{' {
            continue;
        }
        if chars.peek() == Some(&'{') {
            chars.next();
            continue;
        }
        let mut number: u64 = 0;
        // Inside `[…]` (an index key) minijinja reads to the `]`, past any `}`.
        let mut in_key = false;
        for c in chars.by_ref() {
            match c {
                c if !c.is_ascii() => return refuse("a replacement field with a non-ASCII character"),
                ']' if in_key => in_key = false,
                _ if in_key => {}
                '[' => in_key = true,
                '}' => break,
                '{' => return refuse("nested replacement fields are not supported"),
                c if c.is_ascii_digit() => {
                    number = number.saturating_mul(10).saturating_add(u64::from(c as u8 - b'0'));
                    if number > limit as u64 {
                        return refuse(&format!("a number in a replacement field above {limit}"));
                    }
                }
                _ => number = 0,
            }
        }
    }
    Ok(())
}

/// Refuses a printf-style source (the `format` filter) whose `%(key)` holds a non-ASCII character before its `)`
/// (or before the end, unclosed): minijinja reads such a key a byte at a time and panics inside the character.
fn check_printf_keys(source: &str) -> std::result::Result<(), Error> {
    let mut chars = source.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            continue;
        }
        // After `%(`, a key to the `)`; `%%` and conversions like `%s` hold none.
        if chars.next() != Some('(') {
            continue;
        }
        for c in chars.by_ref() {
            if c == ')' {
                break;
            }
            if !c.is_ascii() {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    "format: a %(key) with a non-ASCII character",
                ));
            }
        }
    }
    Ok(())
}

/// A writer that refuses to grow past `limit` bytes.
struct CappedWriter {
    buf: Vec<u8>,
    limit: usize,
}

impl Write for CappedWriter {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        if self.buf.len() + data.len() > self.limit {
            self.buf.resize(self.limit, 0);
            return Err(std::io::Error::other("chat template output too large"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A `fmt::Write` into a string that fails once the string would pass `limit` bytes.
struct CappedString {
    text: String,
    limit: usize,
}

impl std::fmt::Write for CappedString {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.text.len() + s.len() > self.limit {
            return Err(std::fmt::Error);
        }
        self.text.push_str(s);
        Ok(())
    }
}

/// `format_args` written out, or an error once it passes `limit` bytes.
fn format_capped(args: std::fmt::Arguments, limit: usize, filter: &str) -> std::result::Result<String, Error> {
    let mut out = CappedString {
        text: String::new(),
        limit,
    };
    std::fmt::write(&mut out, args).map_err(|_| {
        Error::new(
            ErrorKind::InvalidOperation,
            format!("{filter}: output exceeds {limit} bytes"),
        )
    })?;
    Ok(out.text)
}

/// minijinja's `string` filter with the output's cap: strings pass through, anything else is printed.
fn string_filter(value: &Value, limit: usize) -> std::result::Result<Value, Error> {
    if value.kind() == ValueKind::String {
        return Ok(value.clone());
    }
    format_capped(format_args!("{value}"), limit, "string").map(Value::from)
}

/// minijinja's `pprint` filter (the value's pretty debug form) with the output's cap.
fn pprint_filter(value: &Value, limit: usize) -> std::result::Result<String, Error> {
    format_capped(format_args!("{value:#?}"), limit, "pprint")
}

/// transformers' `{% generation %}…{% endgeneration %}` (which marks assistant text for training masks) renders
/// its body unchanged: rewritten to `{% if true %}…{% endif %}`, keeping whitespace control markers.
fn rewrite_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        out.push_str(&rest[..start]);
        let tag = &rest[start..];
        let inner_start = 2 + tag[2..].find(|c: char| c != '-' && c != '+').unwrap_or(0);
        let inner = &tag[inner_start..];
        let word_start = inner.len() - inner.trim_start().len();
        let word = &inner[word_start..];
        let (keyword, replacement) = if word.starts_with("endgeneration") {
            ("endgeneration", "endif")
        } else if word.starts_with("generation") {
            ("generation", "if true")
        } else {
            ("", "")
        };
        let after = &word[keyword.len()..];
        if !keyword.is_empty() && after.trim_start().trim_start_matches(['-', '+']).starts_with("%}") {
            out.push_str(&tag[..inner_start + word_start]);
            out.push_str(replacement);
            rest = after;
        } else {
            out.push_str("{%");
            rest = &tag[2..];
        }
    }
    out.push_str(rest);
    out
}

/// Python's `iterable` test: `None` is not iterable (minijinja iterates it as empty), undefined is.
fn is_iterable(value: &Value) -> bool {
    !value.is_none() && value.try_iter().is_ok()
}

fn raise_exception(message: String) -> std::result::Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// transformers' filter: `json.dumps(x, ensure_ascii=False, indent=indent, separators=separators,
/// sort_keys=sort_keys)`, refused once its text passes `max_bytes` (a list holding the same list twice, nested
/// 64 deep, would otherwise be 2^64 items long).
fn tojson(value: Value, kwargs: Kwargs, max_bytes: usize) -> std::result::Result<Value, Error> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let separators: Option<Value> = kwargs.get("separators")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match v.as_str() {
            Some(s) => Some(s.to_string()),
            None => Some(" ".repeat(usize::try_from(v.as_i64().unwrap_or(0)).unwrap_or(0).min(64))),
        },
    };
    let (item_sep, key_sep) = match separators.filter(|s| !s.is_none()) {
        Some(s) => {
            let parts: Vec<Value> = s.try_iter()?.collect();
            match (
                parts.first().and_then(|p| p.as_str()),
                parts.get(1).and_then(|p| p.as_str()),
            ) {
                (Some(a), Some(b)) if parts.len() == 2 => (a.to_string(), b.to_string()),
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "separators must be two strings",
                    ))
                }
            }
        }
        None if indent.is_some() => (",".to_string(), ": ".to_string()),
        None => (", ".to_string(), ": ".to_string()),
    };
    let json = JsonStyle {
        indent,
        item_sep,
        key_sep,
        sort_keys: sort_keys.unwrap_or(false),
        ensure_ascii: ensure_ascii.unwrap_or(false),
        max_bytes,
    };
    let mut out = String::new();
    json.write(&value, 0, &mut out)?;
    Ok(Value::from(out))
}

/// Python `json.dumps` output settings.
struct JsonStyle {
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
    ensure_ascii: bool,
    max_bytes: usize,
}

/// Containers nest at most this deep in `tojson` (Python's own recursion limit is about 1000).
const MAX_JSON_DEPTH: usize = 128;

impl JsonStyle {
    fn newline(&self, depth: usize, out: &mut String) {
        if let Some(indent) = &self.indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(indent);
            }
        }
    }

    fn write(&self, value: &Value, depth: usize, out: &mut String) -> std::result::Result<(), Error> {
        if depth > MAX_JSON_DEPTH {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                "tojson: value nests too deeply",
            ));
        }
        // Checked before each value: every value writes at least a byte, so the walk ends soon after the cap.
        if out.len() > self.max_bytes {
            return Err(Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: output exceeds {} bytes", self.max_bytes),
            ));
        }
        match value.kind() {
            ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
            ValueKind::Number => out.push_str(&python_number(value)),
            ValueKind::String => self.write_str(value.as_str().unwrap_or_default(), out),
            ValueKind::Seq | ValueKind::Iterable => {
                // Iterated, not collected: a lazy sequence may be far longer than the cap.
                let mut items = value.try_iter()?.peekable();
                if items.peek().is_none() {
                    out.push_str("[]");
                    return Ok(());
                }
                out.push('[');
                for (i, item) in items.enumerate() {
                    if i > 0 {
                        out.push_str(&self.item_sep);
                    }
                    self.newline(depth + 1, out);
                    self.write(&item, depth + 1, out)?;
                }
                self.newline(depth, out);
                out.push(']');
            }
            ValueKind::Map => {
                let mut keys: Vec<Value> = value.try_iter()?.collect();
                if self.sort_keys {
                    keys.sort();
                }
                if keys.is_empty() {
                    out.push_str("{}");
                    return Ok(());
                }
                out.push('{');
                for (i, key) in keys.iter().enumerate() {
                    if i > 0 {
                        out.push_str(&self.item_sep);
                    }
                    self.newline(depth + 1, out);
                    // Python turns keys into strings: numbers, true/false/null as JSON writes them.
                    match key.kind() {
                        ValueKind::String => self.write_str(key.as_str().unwrap_or_default(), out),
                        ValueKind::None => out.push_str("\"null\""),
                        ValueKind::Bool | ValueKind::Number => {
                            let mut text = String::new();
                            self.write(key, depth + 1, &mut text)?;
                            self.write_str(&text, out);
                        }
                        _ => {
                            return Err(Error::new(
                                ErrorKind::InvalidOperation,
                                "tojson: keys must be str, int, float, bool or None",
                            ))
                        }
                    }
                    out.push_str(&self.key_sep);
                    self.write(&value.get_item(key)?, depth + 1, out)?;
                }
                self.newline(depth, out);
                out.push('}');
            }
            _ => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("tojson: object of type {} is not JSON serializable", value.kind()),
                ))
            }
        }
        Ok(())
    }

    fn write_str(&self, s: &str, out: &mut String) {
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
                c if (c as u32) < 0x20 || (self.ensure_ascii && (c as u32) > 0x7e) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// A number as Python's `json.dumps` writes it: integers in full, floats as `repr` (`1.0`, `1e-07`, `1e+16`).
fn python_number(value: &Value) -> String {
    if let Ok(i) = i128::try_from(value.clone()) {
        if !value.to_string().contains(['.', 'e', 'E', 'i', 'N']) {
            return i.to_string();
        }
    }
    let f = f64::try_from(value.clone()).unwrap_or(f64::NAN);
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    // Python's repr is the shortest round-trip digits, like Rust's, positioned by the decimal exponent.
    let sci = format!("{f:e}"); // e.g. "1.5e-7"
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        let plain = format!("{f}");
        if plain.contains('.') {
            plain
        } else {
            format!("{plain}.0")
        }
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

/// Seconds since the Unix epoch now.
#[cfg(not(target_arch = "wasm32"))]
fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[cfg(target_arch = "wasm32")]
fn unix_now() -> i64 {
    (js_sys::Date::now() / 1000.0) as i64
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// Python's `datetime.strftime` (C locale, UTC) for the directives chat templates use; `%-d`-style unpadded
/// forms as glibc has them. Unknown directives are kept as written, as glibc does.
fn strftime(format: &str, unix_seconds: i64) -> String {
    let days = unix_seconds.div_euclid(86_400);
    let secs = unix_seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute, second) = (secs / 3600, secs / 60 % 60, secs % 60);
    let weekday = (days + 4).rem_euclid(7) as usize; // 1970-01-01 was a Thursday
    let day_of_year = days - days_from_civil(year, 1, 1) + 1;
    let hour12 = if hour % 12 == 0 { 12 } else { hour % 12 };

    let mut out = String::new();
    let mut chars = format.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let unpadded = chars.peek() == Some(&'-');
        if unpadded {
            chars.next();
        }
        let num = |v: i64, width: usize| {
            if unpadded {
                v.to_string()
            } else {
                format!("{v:0width$}")
            }
        };
        match chars.next() {
            Some('Y') => out.push_str(&year.to_string()),
            Some('y') => out.push_str(&num(year.rem_euclid(100), 2)),
            Some('m') => out.push_str(&num(month, 2)),
            Some('d') => out.push_str(&num(day, 2)),
            Some('e') => out.push_str(&format!("{day:2}")),
            Some('H') => out.push_str(&num(hour, 2)),
            Some('I') => out.push_str(&num(hour12, 2)),
            Some('M') => out.push_str(&num(minute, 2)),
            Some('S') => out.push_str(&num(second, 2)),
            Some('j') => out.push_str(&num(day_of_year, 3)),
            Some('p') => out.push_str(if hour < 12 { "AM" } else { "PM" }),
            Some('B') => out.push_str(MONTHS[month as usize - 1]),
            Some('b') | Some('h') => out.push_str(&MONTHS[month as usize - 1][..3]),
            Some('A') => out.push_str(WEEKDAYS[weekday]),
            Some('a') => out.push_str(&WEEKDAYS[weekday][..3]),
            Some('F') => out.push_str(&format!("{year}-{month:02}-{day:02}")),
            Some('T') => out.push_str(&format!("{hour:02}:{minute:02}:{second:02}")),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                if unpadded {
                    out.push('-');
                }
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Year, month, day of a day count since 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Days since 1970-01-01 of a date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strftime_matches_python() {
        // Python: datetime(2025, 1, 15, 10, 30, 0).strftime(...) ; 1736937000 is that instant in UTC.
        let t = 1_736_937_000;
        assert_eq!(strftime("%d %b %Y", t), "15 Jan 2025");
        assert_eq!(strftime("%B %d, %Y", t), "January 15, 2025");
        assert_eq!(
            strftime("%Y-%m-%d %H:%M:%S %a %A %j %I%p %-d/%-m %y %%", t),
            "2025-01-15 10:30:00 Wed Wednesday 015 10AM 15/1 25 %"
        );
        // 2024-02-29 23:59:59 UTC (leap day).
        assert_eq!(strftime("%F %T %j", 1_709_251_199), "2024-02-29 23:59:59 060");
    }

    #[test]
    fn python_numbers() {
        let cases = [
            (Value::from(3), "3"),
            (Value::from(1.0), "1.0"),
            (Value::from(0.1), "0.1"),
            (Value::from(1e-7), "1e-07"),
            (Value::from(1e16), "1e+16"),
            (Value::from(123456.5), "123456.5"),
        ];
        for (v, want) in cases {
            assert_eq!(python_number(&v), want);
        }
    }

    #[test]
    fn generation_tags() {
        assert_eq!(
            rewrite_generation_tags("a{%- generation -%}b{% endgeneration %}{% if x %}{% endif %}"),
            "a{%- if true -%}b{% endif %}{% if x %}{% endif %}"
        );
    }
}
