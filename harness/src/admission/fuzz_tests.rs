//! The reader under generated and mutated input: every shipped scenario and test fixture,
//! taken apart and changed (fields dropped, values of the wrong type, strings and numbers
//! changed, subtrees copied from elsewhere, items and documents dropped or repeated) and
//! re-emitted as YAML, or changed as text (truncated, lines dropped or repeated, indentation
//! and YAML punctuation inserted). The reader must never panic, and every refusal must point
//! at a line and column inside the file. What it accepts goes on through the pure stages `run`
//! would take it through (every mode's rules for every node, the API objects), which must not
//! panic either.
//!
//! `cargo test` runs a fixed sample; the ignored test runs a million cases, on every core:
//! `cargo test --release -p packetproof --lib fuzz -- --ignored` (`PACKETPROOF_FUZZ_CASES`
//! and `PACKETPROOF_FUZZ_SEED` change how many and which).
//!
//! The generator is a seeded splitmix64: a failure names its seed and case, which reproduce
//! it exactly, and no crate is needed for a loop this small.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value};

use super::load_str;
use crate::scenario::fixtures::{EXPOSED, FILE, KUBE_DNS, KUBECTL, WEB};
use packetproof_model::yaml;

/// Every scenario the project ships and the fixtures the reader's tests start from.
fn seeds() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scenarios");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("scenarios/ exists")
        .map(|e| e.expect("listing scenarios/").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut seeds: Vec<String> =
        files.iter().map(|f| std::fs::read_to_string(f).expect("readable")).collect();
    seeds.extend([KUBE_DNS, EXPOSED, WEB, KUBECTL].map(String::from));
    seeds
}

/// splitmix64: small, fast, and the same sequence everywhere for a seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Values of the wrong type, edge values, and text that looks like what the reader expects.
fn odd_value(rng: &mut Rng, strings: &[String]) -> Value {
    match rng.below(16) {
        0 => Value::Null,
        1 => Value::Bool(rng.chance(2)),
        2 => Value::from(0),
        3 => Value::from(-1),
        4 => Value::from(*rng.pick(&[65535i64, 65536, 2147483648, i64::MAX, i64::MIN, 30000, 32767])),
        5 => Value::from(1.5),
        6 => Value::String(String::new()),
        7 => Value::Array(Vec::new()),
        8 => Value::Object(Map::new()),
        9 => Value::String("x".repeat(rng.below(300))),
        10 => Value::String(
            (*rng.pick(&["é", "名前", "\u{0}", "\t", " ", "-", "a.b", "../x", "::", "/", "0/0"])).into(),
        ),
        11 => Value::String(
            (*rng.pick(&[
                "10.244.1.10",
                "10.244.1.0/24",
                "fd00::10",
                "fd00::/64",
                "256.1.1.1",
                "10.96.0.0/33",
                "0.0.0.0",
                "255.255.255.255",
                "::",
                "TCP",
                "UDP",
                "SCTP",
                "None",
                "Local",
                "Cluster",
                "IPv4",
                "IPv6",
                "InternalIP",
                "ExternalIP",
                "List",
                "Node",
                "Pod",
                "Service",
                "EndpointSlice",
                "Scenario",
                "1s",
                "-1s",
                "10ms",
            ]))
            .into(),
        ),
        _ => Value::String(rng.pick(strings).clone()),
    }
}

/// Every string in a value, to be put elsewhere: names and addresses that mean something.
fn collect_strings(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) if s.len() < 80 => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| collect_strings(v, out)),
        Value::Object(map) => map.iter().for_each(|(k, v)| {
            out.push(k.clone());
            collect_strings(v, out)
        }),
        _ => {}
    }
}

/// How many nodes the tree has, to choose one evenly.
fn size(value: &Value) -> usize {
    1 + match value {
        Value::Array(items) => items.iter().map(size).sum(),
        Value::Object(map) => map.values().map(size).sum(),
        _ => 0,
    }
}

/// The `n`th node of the tree in pre-order.
fn nth_mut<'a>(value: &'a mut Value, n: &mut usize) -> Option<&'a mut Value> {
    if *n == 0 {
        return Some(value);
    }
    *n -= 1;
    match value {
        Value::Array(items) => items.iter_mut().find_map(|v| nth_mut(v, n)),
        Value::Object(map) => map.values_mut().find_map(|v| nth_mut(v, n)),
        _ => None,
    }
}

/// One change somewhere in `docs`.
fn mutate_tree(rng: &mut Rng, docs: &mut Vec<Value>, strings: &[String], donors: &[Value]) {
    if docs.is_empty() {
        docs.push(rng.pick(donors).clone());
        return;
    }
    if rng.chance(12) {
        let i = rng.below(docs.len());
        match rng.below(3) {
            0 => {
                docs.remove(i);
            }
            1 => docs.insert(rng.below(docs.len() + 1), docs[i].clone()),
            _ => docs.push(rng.pick(donors).clone()),
        }
        return;
    }
    let doc = rng.below(docs.len());
    let mut n = rng.below(size(&docs[doc]));
    let Some(node) = nth_mut(&mut docs[doc], &mut n) else { return };
    match node {
        Value::Object(map) if !map.is_empty() && rng.chance(2) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            let key = rng.pick(&keys).clone();
            match rng.below(4) {
                0 | 1 => {
                    map.remove(&key);
                }
                2 => {
                    map.insert(format!("{key}{}", rng.pick(&["x", "s", "2", "_"])), odd_value(rng, strings));
                }
                _ => {
                    map.insert(key, odd_value(rng, strings));
                }
            }
        }
        Value::Array(items) if !items.is_empty() && rng.chance(2) => {
            let i = rng.below(items.len());
            match rng.below(3) {
                0 => {
                    items.remove(i);
                }
                1 => items.push(items[i].clone()),
                _ => items.clear(),
            }
        }
        Value::String(s) if rng.chance(2) => {
            let mut chars: Vec<char> = s.chars().collect();
            match rng.below(4) {
                0 => chars.truncate(rng.below(chars.len() + 1)),
                1 => chars
                    .insert(rng.below(chars.len() + 1), *rng.pick(&['.', '/', ':', '-', '9', 'A', ' ', 'ü'])),
                2 if !chars.is_empty() => {
                    let i = rng.below(chars.len());
                    chars[i] = *rng.pick(&['0', '1', '5', 'x', '.', ':']);
                }
                _ => chars = rng.pick(strings).chars().collect(),
            }
            *s = chars.into_iter().collect();
        }
        Value::Number(num) if rng.chance(2) => {
            let v = num.as_i64().unwrap_or(0);
            *node = Value::from(match rng.below(4) {
                0 => v.wrapping_add(1),
                1 => v.wrapping_sub(1),
                2 => -v,
                _ => v.wrapping_mul(1000),
            });
        }
        _ if rng.chance(3) => {
            // A subtree from elsewhere: a valid piece in the wrong place.
            let donor = rng.pick(donors);
            let mut m = rng.below(size(donor));
            let mut donor = donor.clone();
            if let Some(piece) = nth_mut(&mut donor, &mut m) {
                *node = piece.clone();
            }
        }
        _ => *node = odd_value(rng, strings),
    }
}

/// YAML in block style (flow style for empty collections), strings quoted or, when they
/// look plain, sometimes left plain so YAML's own typing applies.
fn emit(rng: &mut Rng, docs: &[Value]) -> String {
    let mut out = String::new();
    for (i, doc) in docs.iter().enumerate() {
        if i > 0 || rng.chance(8) {
            out.push_str("---\n");
        }
        emit_value(rng, doc, 0, &mut out);
    }
    out
}

fn emit_value(rng: &mut Rng, value: &Value, indent: usize, out: &mut String) {
    let pad = " ".repeat(indent);
    match value {
        Value::Object(map) if !map.is_empty() => {
            for (k, v) in map {
                out.push_str(&format!("{pad}{}:", scalar(rng, k)));
                emit_child(rng, v, indent + 2, out);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for v in items {
                out.push_str(&format!("{pad}-"));
                emit_child(rng, v, indent + 2, out);
            }
        }
        other => out.push_str(&format!("{pad}{}\n", inline(rng, other))),
    }
}

fn emit_child(rng: &mut Rng, value: &Value, indent: usize, out: &mut String) {
    match value {
        Value::Object(m) if !m.is_empty() => {
            out.push('\n');
            emit_value(rng, value, indent, out);
        }
        Value::Array(a) if !a.is_empty() => {
            out.push('\n');
            emit_value(rng, value, indent, out);
        }
        other => out.push_str(&format!(" {}\n", inline(rng, other))),
    }
}

fn inline(rng: &mut Rng, value: &Value) -> String {
    match value {
        Value::String(s) => scalar(rng, s),
        Value::Object(_) => "{}".into(),
        Value::Array(_) => "[]".into(),
        other => other.to_string(),
    }
}

fn scalar(rng: &mut Rng, s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || "./_-".contains(c))
        && !s.starts_with(['-', '.']);
    if plain && rng.chance(2) {
        s.to_string()
    } else {
        serde_json::to_string(s).expect("a string serializes")
    }
}

/// One change to the text itself.
fn mutate_text(rng: &mut Rng, text: &mut String) {
    let boundary = |text: &str, at: usize| {
        (0..=at.min(text.len())).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0)
    };
    match rng.below(6) {
        0 => {
            let at = boundary(text, rng.below(text.len() + 1));
            text.truncate(at);
        }
        1 | 2 => {
            let mut lines: Vec<&str> = text.lines().collect();
            if lines.is_empty() {
                return;
            }
            let i = rng.below(lines.len());
            match rng.below(3) {
                0 => {
                    lines.remove(i);
                }
                1 => lines.insert(i, lines[i]),
                _ => {
                    let j = rng.below(lines.len());
                    lines.swap(i, j)
                }
            }
            *text = lines.join("\n") + "\n";
        }
        3 => {
            // Indentation: the shape YAML reads from whitespace.
            let mut lines: Vec<String> = text.lines().map(String::from).collect();
            if let Some(line) = lines.get_mut(rng.below(text.lines().count().max(1))) {
                if rng.chance(2) {
                    const PADS: [&str; 3] = [" ", "  ", "\t"];
                    line.insert_str(0, PADS[rng.below(PADS.len())]);
                } else {
                    *line = line.trim_start_matches(' ').to_string();
                }
            }
            *text = lines.join("\n") + "\n";
        }
        _ => {
            let at = boundary(text, rng.below(text.len() + 1));
            let piece = *rng.pick(&[
                ":",
                "- ",
                "{",
                "}",
                "[",
                "]",
                "\"",
                "'",
                "#",
                "&a ",
                "*a",
                "!!binary ",
                "\t",
                "\n---\n",
                "? ",
                "|",
                ">",
                "%YAML 1.2\n",
                "\u{feff}",
                "\r",
                ",",
                "~",
                "\\",
            ]);
            text.insert_str(at, piece);
        }
    }
}

/// One generated input: a seed, changed one to four times.
fn case(rng: &mut Rng, seeds: &[(String, Vec<Value>)], strings: &[String], donors: &[Value]) -> String {
    let (text, docs) = rng.pick(seeds);
    let changes = 1 + rng.below(4);
    let mut out = if docs.is_empty() || rng.chance(3) {
        text.clone()
    } else {
        let mut docs = docs.clone();
        for _ in 0..changes {
            mutate_tree(rng, &mut docs, strings, donors);
        }
        emit(rng, &docs)
    };
    if rng.chance(3) || out == *text {
        for _ in 0..changes {
            mutate_text(rng, &mut out);
        }
    }
    out
}

/// Whether the reader refused the input, or what went wrong with it.
fn check(text: &str) -> Result<bool, String> {
    let result = catch_unwind(AssertUnwindSafe(|| load_str(text, Path::new(FILE))));
    let errors = match result {
        Err(panic) => return Err(format!("the reader panicked: {}", panic_message(&*panic))),
        Ok(Ok(scenario)) => return downstream(&scenario).map(|()| false),
        Ok(Err(errors)) => errors.errors,
    };
    if errors.is_empty() {
        return Err("refused without an error".into());
    }
    // Lines as YAML counts them (a lone CR breaks a line too), and one more: saphyr puts the
    // end of the input on the line after the last, even without a final line break.
    let lines = text.replace("\r\n", "\n").chars().filter(|&c| c == '\n' || c == '\r').count() + 2;
    for e in &errors {
        if e.file != Path::new(FILE) || e.line == 0 || e.line > lines || e.column == 0 || e.message.is_empty()
        {
            return Err(format!("an error without a position in the file ({lines} lines): {e}"));
        }
    }
    Ok(true)
}

/// The pure stages `run` takes an accepted scenario through must not panic on it either: each
/// mode's rules for every node, and
/// the Node objects the API server serves. (The oracle already ran in the admission stage.)
fn downstream(scenario: &crate::model::Scenario) -> Result<(), String> {
    use crate::proxy::{iptables, ipvs, nftables};
    let cluster = &scenario.cluster;
    catch_unwind(AssertUnwindSafe(|| {
        for node in &cluster.nodes {
            let _ = iptables::render_node(cluster, &node.name, None);
            let _ = nftables::render_node(cluster, &node.name, None);
            let _ = ipvs::render_node(cluster, &node.name, None);
            let _ = crate::proxy::apiserver::objects::node_object(node);
        }
    }))
    .map_err(|panic| {
        format!("a stage after the reader panicked on an accepted scenario: {}", panic_message(&*panic))
    })
}

/// What a panic said, when it said it with a string.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Runs `cases` inputs from `seed` on `threads` threads; returns how many were refused.
fn run(seed: u64, cases: u64, threads: u64) -> u64 {
    let texts = seeds();
    let seeds: Vec<(String, Vec<Value>)> = texts
        .iter()
        .map(|t| {
            (t.clone(), yaml::parse(t).map(|d| d.into_iter().map(|d| d.value).collect()).unwrap_or_default())
        })
        .collect();
    let donors: Vec<Value> = seeds.iter().flat_map(|(_, d)| d.iter().cloned()).collect();
    let mut strings = Vec::new();
    donors.iter().for_each(|d| collect_strings(d, &mut strings));
    strings.sort();
    strings.dedup();
    let refused = AtomicU64::new(0);
    let failure = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (seeds, strings, donors, refused) = (&seeds, &strings, &donors, &refused);
                scope.spawn(move || {
                    for i in (t..cases).step_by(threads as usize) {
                        let mut rng = Rng(seed ^ i.wrapping_mul(0x2545_F491_4F6C_DD1D));
                        let text = case(&mut rng, seeds, strings, donors);
                        match check(&text) {
                            Ok(true) => {
                                refused.fetch_add(1, Ordering::Relaxed);
                            }
                            Ok(false) => {}
                            Err(why) => {
                                return Some(format!("seed {seed}, case {i}: {why}\n--- input ---\n{text}"));
                            }
                        }
                    }
                    None
                })
            })
            .collect();
        workers.into_iter().find_map(|w| w.join().expect("a worker catches its panics"))
    });
    if let Some(failure) = failure {
        panic!("{failure}");
    }
    refused.into_inner()
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

#[test]
fn the_reader_never_panics_and_locates_every_refusal() {
    let cases = env_u64("PACKETPROOF_FUZZ_CASES", 3_000);
    // The same cases on every core: the lib tests' longest, it would otherwise end them alone.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let refused = run(env_u64("PACKETPROOF_FUZZ_SEED", 1), cases, threads);
    // The mutations must mostly break things, or they test little.
    assert!(refused > cases / 2, "only {refused} of {cases} inputs were refused");
}

#[test]
#[ignore = "a million inputs: run with --release -- --ignored"]
fn a_million_inputs() {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let cases = env_u64("PACKETPROOF_FUZZ_CASES", 1_000_000);
    let started = std::time::Instant::now();
    let refused = run(env_u64("PACKETPROOF_FUZZ_SEED", 1), cases, threads);
    eprintln!(
        "{cases} inputs, {refused} refused, no panic, every refusal located, in {:.1?}",
        started.elapsed()
    );
}

/// Found by the million run (seed 1, case 122184): a dual-stack cluster whose networks give no
/// primary family, and a node with one address, panicked naming the primary family.
#[test]
fn a_dual_stack_cluster_without_a_primary_family_is_refused_not_a_panic() {
    let text = WEB.replacen("podCIDR: 10.244.0.0/16", "podCIDR: [10.244.0.0/16, 10.0.0.0/8]", 1);
    assert_eq!(check(&text), Ok(true));
}
