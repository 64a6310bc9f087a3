//! The library's modules form layers that only point down (the picture is in `src/lib.rs`):
//! this test reads every `crate::` path in the library's non-test code and fails on an import
//! that points up or sideways, on a proxy backend that reaches into another backend's
//! files, and on an import cycle between the files of one folder (following `super::` and
//! `self::` paths too). The judge (oracle) must never read the code it judges (proxy).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top to bottom. A module may use only modules of layers below its own. The bottom row
/// (model, yaml, kernel, signals, containment) is the crate `packetproof-model`, re-exported
/// under the same names: cargo itself refuses an import from it of anything above.
const LAYERS: &[&[&str]] = &[
    &["cli"],
    &["commands"],
    // Generated cases: reads them as the reader does, runs them through the engine.
    &["explore"],
    &["compare"],
    &["engine"],
    &["runner"],
    // Reports read the results; the runner writes its evidence files through them.
    &["report"],
    // What a scenario's run comes to: read by the engine, the reports, the commands, the tests.
    &["results"],
    // Rule coverage: traces (observe) read on the scenario's nodes (topology), grouped by
    // template for the reports.
    &["coverage"],
    // Each kind of probe plans with the oracle, sends with traffic, judges with verdict: a
    // layer above all three, which only the runner calls. Beside it the stage (namespaces,
    // servers, the proxy, captures), which the runner and `bench` set up through.
    &["probe", "stage"],
    // Reads a file (scenario), then asks the proxy factory and the oracle what the reader
    // cannot tell: whether the proxy can run it, whether its probes can be judged.
    &["admission"],
    &["verdict"],
    &["proxy"],
    &["apiserver"],
    &["traffic", "reuse"],
    &["observe"],
    &["topology", "privileges"],
    // The judge and the reader: peers, neither reads the other.
    &["oracle", "scenario"],
    &["kubernetes"],
    &["model", "yaml"],
    &["kernel", "signals", "containment"],
];

/// The proxy backends: each may use `proxy`'s shared modules and its own files, and another
/// backend only through what that backend's `mod.rs` defines (or re-exports from outside the
/// backend), never its files nor what `mod.rs` re-exports from them.
const BACKENDS: &[&str] =
    &["iptables", "nftables", "ipvs", "ruleset", "command", "apiserver", "cluster", "reference"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// A file that only tests compile: `tests.rs`, `*_tests.rs`, `test_support.rs`, `tests/…`.
fn test_only(relative: &Path) -> bool {
    relative.components().any(|c| c.as_os_str() == "tests")
        || relative.file_stem().is_some_and(|s| {
            let s = s.to_string_lossy();
            s == "tests" || s.ends_with("_tests") || s == "test_support"
        })
}

/// The file's code without comments and without its inline `#[cfg(test)] mod tests { … }`
/// (by convention the file's last item); a `#[cfg(test)] mod tests;` declaration names a
/// file that `test_only` leaves out.
fn code(text: &str) -> String {
    let mut end = text.len();
    for (at, _) in text.match_indices("#[cfg(test)]\nmod ") {
        let line = text[at..].lines().nth(1).unwrap_or_default();
        if line.trim_end().ends_with('{') {
            end = at;
            break;
        }
    }
    text[..end].lines().map(|l| l.split("//").next().unwrap_or_default()).collect::<Vec<_>>().join("\n")
}

/// Every `crate::a::b…` path the code names, as its segments (`use crate::{a, b::c}` too).
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let after = &code[at + "crate::".len()..];
        let preceded_by_ident =
            code[..at].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
        if !preceded_by_ident {
            if let Some(group) = after.strip_prefix('{') {
                let end = matching_brace(group);
                for item in split_top_level(&group[..end]) {
                    paths.push(segments(&item));
                }
            } else {
                paths.push(segments(after));
            }
        }
    }
    paths.retain(|p| !p.is_empty());
    paths
}

fn matching_brace(text: &str) -> usize {
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return i,
            '}' => depth -= 1,
            _ => {}
        }
    }
    text.len()
}

/// `a, b::{c, d}, e` → `a`, `b::{c, d}`, `e`.
fn split_top_level(text: &str) -> Vec<String> {
    let (mut items, mut current, mut depth) = (Vec::new(), String::new(), 0);
    for c in text.chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    items.push(current);
    items.into_iter().map(|i| i.trim().to_string()).filter(|i| !i.is_empty() && i != "self").collect()
}

/// `proxy::iptables::Mutant)…` → `["proxy", "iptables", "Mutant"]`.
fn segments(text: &str) -> Vec<String> {
    let mut segments = Vec::new();
    let mut rest = text.trim_start();
    loop {
        let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        segments.push(rest[..end].to_string());
        match rest[end..].strip_prefix("::") {
            Some(next) if !next.starts_with('{') => rest = next,
            _ => break,
        }
    }
    segments
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// (file, its top-level module, the module path under `src/`, the code)
/// The library's sources and those of the crates below it (the bottom layer, the judge), whose
/// modules it re-exports under the same names: inside each, the layers are checked here too.
fn source_roots() -> Vec<PathBuf> {
    let harness = Path::new(env!("CARGO_MANIFEST_DIR"));
    vec![
        src(),
        harness.join("model/src"),
        harness.join("network/src"),
        harness.join("oracle/src"),
        harness.join("proxy/src"),
        harness.join("scenario/src"),
    ]
}

fn library() -> Library {
    let mut files = Vec::new();
    for root in source_roots() {
        let mut found = Vec::new();
        rust_files(&root, &mut found);
        files.extend(found.into_iter().map(|f| (root.clone(), f)));
    }
    files.sort();
    let mut out = Vec::new();
    for (root, file) in files {
        let relative = file.strip_prefix(&root).unwrap().to_path_buf();
        if test_only(&relative) || relative == Path::new("lib.rs") || relative == Path::new("main.rs") {
            continue;
        }
        let mut path: Vec<String> = relative
            .with_extension("")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if path.last().is_some_and(|l| l == "mod") {
            path.pop();
        }
        let text = std::fs::read_to_string(&file).unwrap();
        out.push((relative, path[0].clone(), path, code(&text)));
    }
    out
}

#[test]
fn every_module_is_in_a_layer() {
    let unplaced: BTreeSet<String> =
        library().into_iter().map(|(_, m, _, _)| m).filter(|m| layer_of(m).is_none()).collect();
    assert!(unplaced.is_empty(), "modules in no layer of tests/layers.rs: {unplaced:?}");
}

#[test]
fn imports_only_point_down() {
    let mut wrong = Vec::new();
    for (file, module, _, code) in library() {
        let Some(own) = layer_of(&module) else { continue };
        for path in crate_paths(&code) {
            let target = &path[0];
            if *target == module {
                continue;
            }
            match layer_of(target) {
                Some(layer) if layer > own => {}
                Some(_) => {
                    wrong.push(format!("{}: {module} uses crate::{}", file.display(), path.join("::")))
                }
                None => wrong.push(format!("{}: crate::{} is in no layer", file.display(), path.join("::"))),
            }
        }
    }
    assert!(wrong.is_empty(), "imports that point up or sideways:\n{}", wrong.join("\n"));
}

/// Pairs no order of the layers may allow: the judge never reads the code it judges, and the
/// reader only reads. The verdict, the probe kinds, the oracle and the reader sit above `proxy`
/// or below it, but never use it; the reader never asks the oracle (the admission stage does).
const FORBIDDEN: &[(&str, &str)] = &[
    ("verdict", "proxy"),
    ("probe", "proxy"),
    ("oracle", "proxy"),
    ("scenario", "proxy"),
    ("scenario", "oracle"),
];

#[test]
fn the_judge_never_reads_what_it_judges() {
    let wrong: Vec<String> = library()
        .into_iter()
        .flat_map(|(file, module, _, code)| {
            let forbidden = |path: &Vec<String>| FORBIDDEN.contains(&(module.as_str(), path[0].as_str()));
            let named: Vec<Vec<String>> = crate_paths(&code).into_iter().filter(forbidden).collect();
            named
                .into_iter()
                .map(|path| format!("{}: {module} uses crate::{}", file.display(), path.join("::")))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(wrong.is_empty(), "forbidden imports:\n{}", wrong.join("\n"));
}

/// The forbidden pairs are checked on what they claim: a verdict file that names the proxies
/// fails, whatever the layers' order.
#[test]
fn a_verdict_that_reads_a_proxy_is_forbidden() {
    let code = "use crate::proxy::iptables;\nfn f() {}";
    let named = crate_paths(code);
    assert!(named.iter().any(|p| FORBIDDEN.contains(&("verdict", p[0].as_str()))), "{named:?}");
}

#[test]
fn no_backend_reaches_into_another() {
    let src = src();
    let faces = faces(&library());
    let mut wrong = Vec::new();
    for (file, module, own_path, code) in library() {
        if module != "proxy" {
            continue;
        }
        let own_backend = own_path.get(1).filter(|b| BACKENDS.contains(&b.as_str()));
        let mut named = crate_paths(&code);
        // `super::x` from a backend's own files stays inside it; from proxy's shared files it
        // names a backend like `crate::proxy::x`.
        if own_backend.is_none() && own_path.len() == 2 {
            named.extend(code.match_indices("super::").map(|(at, _)| {
                let mut p = vec!["proxy".to_string()];
                p.extend(segments(&code[at + "super::".len()..]));
                p
            }));
        }
        for path in named {
            let [proxy, backend, inner, ..] = path.as_slice() else { continue };
            if proxy != "proxy" || !BACKENDS.contains(&backend.as_str()) || Some(backend) == own_backend {
                continue;
            }
            let dir = src.join("proxy").join(backend);
            // A name the backend's `mod.rs` re-exports from one of its files is that file's.
            let reexported =
                faces.get(&vec!["proxy".to_string(), backend.clone()]).is_some_and(|f| f.contains_key(inner));
            if dir.join(format!("{inner}.rs")).exists() || dir.join(inner).is_dir() || reexported {
                wrong.push(format!("{}: crate::{}", file.display(), path.join("::")));
            }
        }
    }
    assert!(wrong.is_empty(), "backends reaching into another backend's files:\n{}", wrong.join("\n"));
}

#[test]
fn test_modules_are_left_out_and_code_is_kept() {
    let text = "use crate::a;\n#[cfg(test)]\nmod tests;\nuse crate::b; // crate::c\n#[cfg(test)]\nmod tests {\n    use crate::d;\n}\n";
    assert_eq!(crate_paths(&code(text)), vec![vec!["a".to_string()], vec!["b".to_string()]]);
}

#[test]
fn the_reader_of_paths_reads_them() {
    let found = crate_paths("use crate::{model::{A, B}, oracle};\nlet x = crate::proxy::iptables::Rule::X;");
    assert_eq!(
        found,
        vec![
            vec!["model".to_string()],
            vec!["oracle".to_string()],
            vec!["proxy".to_string(), "iptables".to_string(), "Rule".to_string(), "X".to_string()],
        ]
    );
}

/// Every path the code names from the module `from`: `crate::…`, `self::…` and `super::…`,
/// made absolute.
fn absolute_paths(from: &[String], code: &str) -> Vec<Vec<String>> {
    let mut paths = crate_paths(code);
    for (keyword, base) in [("self::", from), ("super::", &from[..from.len() - 1])] {
        // Read `self::a` and `super::a` as `crate::a`, then put the base back in front.
        let renamed = code.replace("crate::", "CRATE::").replace(keyword, "crate::");
        for relative in crate_paths(&renamed) {
            let mut absolute = base.to_vec();
            let mut rest = relative.as_slice();
            // `super::super::a` became `crate::crate::a`, read as ["crate", "a"].
            while let Some((_, tail)) = rest.split_first().filter(|(first, _)| *first == "crate") {
                absolute.pop();
                rest = tail;
            }
            absolute.extend(rest.iter().cloned());
            paths.push(absolute);
        }
    }
    paths
}

/// The names a folder's `mod.rs` re-exports, and the child each comes from:
/// `pub use child::{A, B as C};` → A and C from `child`.
fn reexports(code: &str, children: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for statement in code.split(';') {
        let statement = statement.trim();
        let Some(rest) =
            ["pub use ", "pub(crate) use ", "pub(super) use "].iter().find_map(|p| statement.strip_prefix(p))
        else {
            continue;
        };
        let rest = rest.strip_prefix("self::").unwrap_or(rest);
        let child = segments(rest).into_iter().next().unwrap_or_default();
        if !children.contains(&child) {
            continue;
        }
        let Some(open) = rest.find('{') else {
            if let Some(last) = rest.rsplit([':', ' ']).next() {
                names.insert(last.to_string(), child.clone());
            }
            continue;
        };
        let group = &rest[open + 1..open + 1 + matching_brace(&rest[open + 1..])];
        for item in split_top_level(group) {
            let last = item.rsplit([':', ' ']).next().unwrap_or_default();
            names.insert(last.to_string(), child.clone());
        }
    }
    names
}

type Library = Vec<(PathBuf, String, Vec<String>, String)>;

/// The files and sub-folders of `folder`, by name.
fn children(files: &Library, folder: &[String]) -> BTreeSet<String> {
    files
        .iter()
        .filter(|(_, _, p, _)| p.len() > folder.len() && p.starts_with(folder))
        .map(|(_, _, p, _)| p[folder.len()].clone())
        .collect()
}

/// For each folder, the names its `mod.rs` re-exports and the child each comes from.
fn faces(files: &Library) -> BTreeMap<Vec<String>, BTreeMap<String, String>> {
    files
        .iter()
        .filter(|(file, ..)| file.file_name().is_some_and(|n| n == "mod.rs"))
        .map(|(_, _, p, code)| (p.clone(), reexports(code, &children(files, p))))
        .collect()
}

/// The import graph between the files (and sub-folders) of each folder: for the folder
/// `scenario`, an edge `addresses → net` when `scenario/addresses.rs` names anything in
/// `scenario/net.rs`, directly or through a name `scenario/mod.rs` re-exports from it.
///
/// A folder's `mod.rs` is its face, not a node: it declares its children, re-exports them and
/// may assemble them (a backend factory), and the children may use what it defines. Counting
/// those edges would call every factory a cycle; what is counted is sibling to sibling.
fn folder_graphs() -> BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> {
    let files = library();
    let faces = faces(&files);
    let mut graphs: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (_, _, from, code) in &files {
        for target in absolute_paths(from, code) {
            // Each folder that holds both the file and the target, below the top level (which
            // `imports_only_point_down` orders).
            for depth in 1..from.len() {
                let folder = &from[..depth];
                if !faces.contains_key(folder) || target.len() <= depth || !target.starts_with(folder) {
                    continue;
                }
                let siblings = children(&files, folder);
                let source = &from[depth];
                let named = &target[depth];
                let node = if siblings.contains(named) {
                    named.clone()
                } else if let Some(child) = faces[folder].get(named) {
                    child.clone()
                } else {
                    continue; // defined in the face itself
                };
                if node != *source {
                    graphs
                        .entry(folder.to_vec())
                        .or_default()
                        .entry(source.clone())
                        .or_default()
                        .insert(node);
                }
            }
        }
    }
    graphs
}

/// The strongly connected components with more than one node (Tarjan's algorithm), each
/// sorted, as the cycles to report.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, node: &'a str) {
        let next = s.index.len();
        s.index.insert(node, next);
        s.low.insert(node, next);
        s.stack.push(node);
        for target in s.graph.get(node).into_iter().flatten() {
            if !s.index.contains_key(target.as_str()) {
                visit(s, target);
                let low = s.low[node].min(s.low[target.as_str()]);
                s.low.insert(node, low);
            } else if s.stack.contains(&target.as_str()) {
                let low = s.low[node].min(s.index[target.as_str()]);
                s.low.insert(node, low);
            }
        }
        if s.low[node] == s.index[node] {
            let mut component = Vec::new();
            while let Some(top) = s.stack.pop() {
                component.push(top.to_string());
                if top == node {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.found.push(component);
            }
        }
    }
    let mut state =
        State { graph, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), found: Vec::new() };
    for node in graph.keys() {
        if !state.index.contains_key(node.as_str()) {
            visit(&mut state, node);
        }
    }
    state.found
}

/// One loop through a component, to print: `a → b → c → a`.
fn one_loop(graph: &BTreeMap<String, BTreeSet<String>>, component: &[String]) -> String {
    let start = &component[0];
    // Breadth-first from start's successors back to start, inside the component.
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start.as_str()]);
    while let Some(node) = queue.pop_front() {
        for next in graph.get(node).into_iter().flatten().filter(|n| component.contains(n)) {
            if next == start {
                let mut path = vec![start.as_str(), node];
                let mut at = node;
                while at != start {
                    at = came_from[at];
                    path.push(at);
                }
                path.reverse();
                return path.join(" → ");
            }
            if !came_from.contains_key(next.as_str()) {
                came_from.insert(next, node);
                queue.push_back(next);
            }
        }
    }
    component.join(", ")
}

#[test]
fn no_cycle_inside_a_folder() {
    let mut found = Vec::new();
    for (folder, graph) in folder_graphs() {
        for component in cycles(&graph) {
            found.push(format!("{}/: {}", folder.join("/"), one_loop(&graph, &component)));
        }
    }
    assert!(found.is_empty(), "import cycles between the files of a folder:\n{}", found.join("\n"));
}

#[test]
fn relative_paths_are_made_absolute_and_cycles_found() {
    let from = ["scenario".to_string(), "net".to_string()];
    let found = absolute_paths(&from, "use super::addresses::A;\nuse self::x;\nuse super::super::model;");
    let names: Vec<String> = found.iter().map(|p| p.join("::")).collect();
    assert_eq!(names, ["scenario::net::x", "scenario::addresses::A", "model"]);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, to) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        graph.entry(from.to_string()).or_default().insert(to.to_string());
    }
    let found = cycles(&graph);
    assert_eq!(found, [["a", "b", "c"]]);
    assert_eq!(one_loop(&graph, &found[0]), "a → b → c → a");
}
