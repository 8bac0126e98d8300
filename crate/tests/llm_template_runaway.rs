//! Templates that run away (loops, recursion, values that double at every step) fail with a `template` error
//! within a second, and the render's memory stays bounded. Alone in its binary so that the allocator's peak is
//! the render's own.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use loom_wasm::llm::template::{ChatMessage, ChatTemplate};

/// The system allocator, counting the bytes live and their peak.
struct PeakAlloc;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

unsafe impl GlobalAlloc for PeakAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = System.alloc(layout);
        if !ptr.is_null() {
            grew(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        System.dealloc(ptr, layout);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = System.realloc(ptr, layout, new_size);
        if !new.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            grew(new_size);
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: PeakAlloc = PeakAlloc;

/// Most a runaway render may hold at once (its fuel pays for 64 MB of strings).
const MAX_PEAK_BYTES: usize = 256 << 20;

/// How long a render may take before the test calls it a hang (a passing one takes under a second).
const HANG: Duration = Duration::from_secs(20);

/// Doubles `ns.v`, starting from `start`, 64 times with `step`, then prints `show` of it.
fn doubling(start: &str, step: &str, show: &str) -> String {
    format!(
        "{{% set ns = namespace(v={start}) %}}{{% for i in range(64) %}}{{% set ns.v = {step} %}}{{% endfor %}}{{{{ {show} }}}}"
    )
}

/// Builds `ns.v` and `ns.w` alike, each a list holding the previous one twice, 64 deep, then runs `show`.
fn shared_pair(show: &str) -> String {
    "{% set ns = namespace(v=[1], w=[1]) %}{% for i in range(64) %}{% set ns.v = [ns.v, ns.v] %}\
     {% set ns.w = [ns.w, ns.w] %}{% endfor %}"
        .to_string()
        + show
}

#[test]
fn runaway_templates_are_typed_errors_quickly_in_bounded_memory() {
    let messages = vec![ChatMessage {
        role: "user".into(),
        content: "Hello".into(),
    }];
    let cases = [
        (
            "endless loop",
            "{% for i in range(1000000000) %}{% endfor %}".to_string(),
        ),
        (
            "nested loops",
            "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}".into(),
        ),
        (
            "recursion",
            "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}".into(),
        ),
        (
            "recursive loop",
            "{% for m in [1] recursive %}{{ loop([1]) }}{% endfor %}".into(),
        ),
        (
            "huge output",
            "{% for i in range(10000000) %}xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx{% endfor %}".into(),
        ),
        (
            "string ~ doubling",
            doubling("'xxxxxxxx'", "ns.v ~ ns.v", "ns.v | length"),
        ),
        (
            "string + doubling",
            doubling("'xxxxxxxx'", "ns.v + ns.v", "ns.v | length"),
        ),
        ("string * doubling", doubling("'xxxxxxxx'", "ns.v * 2", "ns.v | length")),
        (
            "join doubling",
            doubling("'xxxxxxxx'", "[ns.v, ns.v] | join", "ns.v | length"),
        ),
        (
            "replace doubling",
            doubling("'xxxxxxxx'", "ns.v | replace('x', 'xx')", "ns.v | length"),
        ),
        (
            "method doubling",
            doubling("'xxxxxxxx'", "ns.v.replace('x', 'xx')", "ns.v | length"),
        ),
        (
            "upper doubling",
            doubling("'xxxxxxxx'", "(ns.v ~ ns.v) | upper", "ns.v | length"),
        ),
        ("list * doubling", doubling("[1]", "ns.v * 2", "ns.v | length")),
        ("tuple + doubling", doubling("(1,)", "ns.v + ns.v", "ns.v | length")),
        (
            "materialized list doubling",
            doubling("[1]", "ns.v | list + ns.v | list", "ns.v | length"),
        ),
        ("shared list, printed", doubling("[1]", "[ns.v, ns.v]", "ns.v")),
        (
            "shared list, tojson",
            doubling("[1]", "[ns.v, ns.v]", "ns.v | tojson | length"),
        ),
        (
            "shared list, indented tojson",
            doubling("['xxxxxxxx']", "[ns.v, ns.v]", "ns.v | tojson(indent=99) | length"),
        ),
        (
            "shared list, string",
            doubling("[1]", "[ns.v, ns.v]", "ns.v | string | length"),
        ),
        (
            "shared list, pprint",
            doubling("[1]", "[ns.v, ns.v]", "ns.v | pprint | length"),
        ),
        (
            "shared map, tojson",
            doubling("{}", "{'a': ns.v, 'b': ns.v}", "ns.v | tojson | length"),
        ),
        (
            "set block doubling",
            doubling(
                "'xxxxxxxx'",
                "ns.v %}{% set t %}{{ ns.v }}{{ ns.v }}{% endset %}{% set ns.v = t",
                "ns.v | length",
            ),
        ),
        (
            "macro doubling",
            "{% macro d(s) %}{{ s }}{{ s }}{% endmacro %}".to_string()
                + &doubling("'xxxxxxxx'", "d(ns.v)", "ns.v | length"),
        ),
        ("string repeat", "{{ 'x' * 1000000000 }}".into()),
        ("list repeat", "{{ ([1] * 1000000000) | list | length }}".into()),
        ("huge range", "{{ range(1000000000000) | join | length }}".into()),
        ("huge indent", "{{ 'a\nb' | indent(1000000000) | length }}".into()),
        (
            "huge format width",
            "{{ '%1000000000s' | format('x') | length }}".into(),
        ),
        (
            "huge str.format width",
            "{{ '{:888888888888}'.format('x') | length }}".into(),
        ),
        (
            "huge str.format precision",
            "{{ '{:.999999999999f}'.format(1.5) | length }}".into(),
        ),
        (
            "str.format width from an argument",
            "{{ '{:{}}'.format('x', 999999999999) | length }}".into(),
        ),
        // Found by the chat_template fuzz target: minijinja's key parser panicked inside a multi-byte character.
        ("non-ASCII str.format key", "{{ '{0[é]}'.format(['x']) }}".into()),
        // An index key runs to its `]`, past the field's `}`: here into the text after it.
        ("unclosed str.format key", "{{ '<{0[a}｜>'.format(['x']) }}".into()),
        ("non-ASCII format filter key", "{{ '%(é)s' | format(x=1) }}".into()),
        ("unclosed format filter key", "{{ '%(a ｜' | format(x=1) }}".into()),
        // Walks inside one instruction over values that are small but hold themselves many times over (minijinja
        // patched for these, vendor/minijinja/PATCH.md): a concatenation doubled 64 times, and two lists built
        // alike, each holding the same list twice, 64 deep (2^64 items to compare, hash or print).
        ("list + doubling", doubling("[1]", "ns.v + ns.v", "ns.v | length")),
        (
            "iterable + doubling",
            doubling("[1] | select", "ns.v + ns.v", "ns.v | list | length"),
        ),
        ("shared lists, ==", shared_pair("{{ ns.v == ns.w }}")),
        ("shared lists, <", shared_pair("{{ ns.v < ns.w }}")),
        ("shared lists, in", shared_pair("{{ ns.w in [ns.v] }}")),
        ("shared lists, ~", shared_pair("{{ (ns.v ~ '') | length }}")),
        ("shared lists, join", shared_pair("{{ ns.v | join | length }}")),
        ("shared lists, upper", shared_pair("{{ ns.v | upper | length }}")),
        (
            "shared lists, str.format",
            shared_pair("{{ '{}'.format(ns.v) | length }}"),
        ),
        (
            "shared lists, format",
            shared_pair("{{ '%s' | format(ns.v) | length }}"),
        ),
        (
            "shared lists, unique",
            shared_pair("{{ [ns.v, ns.w] | unique | list | length }}"),
        ),
        ("shared lists, sort", shared_pair("{{ [ns.v, ns.w] | sort | length }}")),
        ("shared lists, dict key", shared_pair("{{ {ns.v: 1} | length }}")),
        ("shared lists, count", shared_pair("{{ [ns.v].count(ns.w) }}")),
        (
            "shared lists, last instruction",
            shared_pair("{% if ns.v == ns.w %}same{% endif %}"),
        ),
        (
            "shared maps, ==",
            "{% set ns = namespace(v={}, w={}) %}{% for i in range(64) %}{% set ns.v = {'a': ns.v, 'b': ns.v} %}\
             {% set ns.w = {'a': ns.w, 'b': ns.w} %}{% endfor %}{{ ns.v == ns.w }}"
                .into(),
        ),
        ("unknown filter", "{{ messages | no_such_filter }}".into()),
        ("undefined method", "{{ messages.nope() }}".into()),
    ];
    let mut failures = Vec::new();
    for (name, source) in cases {
        let before = LIVE.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        let start = Instant::now();
        // On a thread of its own, so that a render that hangs fails the test instead of hanging it.
        let (sender, receiver) = std::sync::mpsc::channel();
        let thread_messages = messages.clone();
        std::thread::spawn(move || {
            let result = ChatTemplate::new(&source).and_then(|t| t.render(&thread_messages, true, None, None));
            let _ = sender.send(result);
        });
        let Ok(result) = receiver.recv_timeout(HANG) else {
            failures.push(format!("{name}: no result after {HANG:?}"));
            break;
        };
        let elapsed = start.elapsed();
        let peak = PEAK.load(Ordering::Relaxed) - before;
        match result {
            Err(e) if e.code() == "template" => {}
            Err(e) => failures.push(format!("{name}: {} error {e}", e.code())),
            Ok(out) => failures.push(format!("{name}: rendered {} bytes", out.len())),
        }
        if elapsed > Duration::from_secs(1) {
            failures.push(format!("{name}: took {elapsed:?}"));
        }
        if peak > MAX_PEAK_BYTES {
            failures.push(format!("{name}: peak {} MiB", peak >> 20));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
