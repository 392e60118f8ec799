//! Benchmark: what building a JSON tree of a call's arguments costs the gate within its
//! memory bound ([`hitl_operator::gate::memory`]) against building it as before (one
//! `serde_json` parse), per typical gated call, measured in the same run; and the bytes a tree
//! takes per value, for the shapes that cost the most, against
//! [`memory::BYTES_PER_VALUE`], the worst size the gate reserves.
//!
//! Run: `cargo bench --bench gate_tree` (set `GATE_TREE_ROUNDS` to change the calls per round,
//! default 200 000).

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use hitl_operator::gate::memory::{self, Tree};
use serde_json::Value;

/// The system allocator, counting the bytes allocated now and the most at once.
struct Counting;

static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

#[allow(
    unsafe_code,
    reason = "a global allocator is an unsafe trait; this one only counts and defers to System"
)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = NOW.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(now, Ordering::Relaxed);
        // SAFETY: as the caller's contract with `GlobalAlloc::alloc`.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        NOW.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: as the caller's contract with `GlobalAlloc::dealloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The arguments of a typical gated call: a path, a short text, a flag and a small list.
const TYPICAL: &[u8] = br#"{"path":"/data/reports/2026/q3.md","content":"Quarterly report: revenue up 4%, costs flat. See appendix for details.","overwrite":true,"tags":["finance","q3"]}"#;

fn main() {
    let rounds: usize = std::env::var("GATE_TREE_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    println!(
        "a typical gated call's arguments ({} bytes), {rounds} calls a round, 5 rounds:",
        TYPICAL.len()
    );
    println!(
        "{:>8} {:>16} {:>16} {:>8}",
        "round", "parse (ns/call)", "bounded (ns/call)", "ratio"
    );
    let mut ratios = Vec::new();
    for round in 1..=5 {
        let start = Instant::now();
        for _ in 0..rounds {
            let value: Value = serde_json::from_slice(black_box(TYPICAL)).unwrap();
            black_box(&value);
        }
        let parse = start.elapsed().as_nanos() as f64 / rounds as f64;
        let start = Instant::now();
        runtime.block_on(async {
            for _ in 0..rounds {
                let tree = Tree::of(black_box(TYPICAL)).await.unwrap();
                black_box(tree.value());
            }
        });
        let bounded = start.elapsed().as_nanos() as f64 / rounds as f64;
        ratios.push(bounded / parse);
        println!(
            "{round:>8} {parse:>16.0} {bounded:>16.0} {:>7.2}x",
            bounded / parse
        );
    }
    ratios.sort_by(f64::total_cmp);
    println!("median ratio, bounded / parse: {:.2}x", ratios[2]);

    println!();
    println!(
        "bytes a tree takes per value, at its peak while it is built (the gate reserves {} a value, and the text):",
        memory::BYTES_PER_VALUE
    );
    for (name, json) in shapes() {
        let values = memory::count_values(json.as_bytes(), usize::MAX).unwrap();
        let before = NOW.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        let value: Value = serde_json::from_slice(json.as_bytes()).unwrap();
        let peak = PEAK.load(Ordering::Relaxed) - before;
        drop(value);
        let per_value = peak.saturating_sub(json.len()) as f64 / values as f64;
        println!(
            "{name:>28}: {} bytes, {values} values, peak {:.1} MiB = {:.1}x its text; {per_value:.0} bytes a value beyond the text",
            json.len(),
            peak as f64 / (1 << 20) as f64,
            peak as f64 / json.len() as f64,
        );
        assert!(
            per_value <= memory::BYTES_PER_VALUE as f64,
            "{name}: {per_value:.0} bytes a value, over the {} reserved",
            memory::BYTES_PER_VALUE
        );
    }
}

/// The costliest shapes of about 1 MB each.
fn shapes() -> Vec<(&'static str, String)> {
    let n = 1 << 18;
    let list = |unit: &str| format!("[{}]", vec![unit; n].join(","));
    let keys: Vec<String> = (0..n).map(|i| format!(r#""k{i}":0"#)).collect();
    vec![
        ("small numbers [0,0,…]", list("0")),
        ("one-element arrays [[0],…]", list("[0]")),
        ("small objects [{\"a\":0},…]", list(r#"{"a":0}"#)),
        ("many keys {\"k0\":0,…}", format!("{{{}}}", keys.join(","))),
        ("empty objects [{},…]", list("{}")),
        ("short strings [\"x\",…]", list(r#""x""#)),
        (
            "nested 127 deep, side by side",
            format!(
                "[{}]",
                vec![format!("{}0{}", "[".repeat(126), "]".repeat(126)); n / 64].join(",")
            ),
        ),
    ]
}
