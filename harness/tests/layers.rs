//! The library's modules form layers that only point down (the picture is in `src/lib.rs`):
//! this test reads every `crate::` path in the library's non-test code and fails on an import
//! that points up or sideways, and on a proxy backend that reaches into another backend's
//! files. The judge (oracle) must never read the code it judges (proxy).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Top to bottom. A module may use only modules of layers below its own.
const LAYERS: &[&[&str]] = &[
    &["cli"],
    &["commands"],
    &["engine"],
    &["report"],
    &["runner"],
    // Each kind of probe plans with the oracle, sends with traffic, judges with verdict: a
    // layer above all three, which only the runner calls.
    &["probe"],
    &["scenario"],
    &["verdict"],
    &["proxy"],
    &["apiserver"],
    &["traffic"],
    &["observe"],
    &["topology", "privileges"],
    &["oracle"],
    &["kubernetes"],
    &["model", "yaml"],
    &["kernel", "signals"],
];

/// The proxy backends: each may use `proxy`'s shared modules and its own files, and another
/// backend only through what that backend's `mod.rs` exports, never its files.
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
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        let preceded_by_ident =
            rest[..at].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
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
        rest = after;
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
fn library() -> Vec<(PathBuf, String, Vec<String>, String)> {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let relative = file.strip_prefix(src()).unwrap().to_path_buf();
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

#[test]
fn no_backend_reaches_into_another() {
    let src = src();
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
            if dir.join(format!("{inner}.rs")).exists() || dir.join(inner).is_dir() {
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
