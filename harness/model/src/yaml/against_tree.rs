//! The event reader against what it replaced: saphyr's tree loader, then a conversion of each
//! tree into a value and positions kept by field name. Both must give the same documents,
//! positions (of every value and key, and of missing fields) and errors on awkward YAML and on
//! the shipped scenarios changed at random as text.

use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, YamlData};
use serde_json::{Map, Number, Value};

use super::{FieldPath, Pos, Segment, YamlError, parse};

/// A document as the old reader gave it.
struct OldDocument {
    value: Value,
    start: Pos,
    spots: Spots,
}

/// Positions as the old reader kept them: by field name, in the file's order.
struct Spots {
    value: Pos,
    inner: Inner,
}

enum Inner {
    Scalar,
    Mapping(Vec<(String, Pos, Spots)>),
    Sequence(Vec<Spots>),
}

impl Spots {
    fn scalar(value: Pos) -> Spots {
        Spots { value, inner: Inner::Scalar }
    }

    fn find(&self, path: &FieldPath) -> (Option<Pos>, &Spots, usize) {
        let (mut key, mut here) = (None, self);
        for (depth, segment) in path.0.iter().enumerate() {
            let next = match (segment, &here.inner) {
                (Segment::Key(k), Inner::Mapping(fields)) => {
                    fields.iter().find(|(name, ..)| name == k).map(|(_, at, spots)| (Some(*at), spots))
                }
                (Segment::Index(i), Inner::Sequence(items)) => items.get(*i).map(|spots| (None, spots)),
                _ => None,
            };
            match next {
                Some(found) => (key, here) = found,
                None => return (key, here, depth),
            }
        }
        (key, here, path.0.len())
    }

    fn value_pos(&self, path: &FieldPath) -> Pos {
        self.find(path).1.value
    }

    fn key_pos(&self, path: &FieldPath) -> Pos {
        match self.find(path) {
            (Some(key), _, depth) if depth == path.0.len() => key,
            (_, spots, _) => spots.value,
        }
    }
}

/// The reader as it was: the whole file's tree, then each document converted.
fn parse_with_tree(text: &str) -> Result<Vec<OldDocument>, YamlError> {
    let docs = MarkedYaml::load_from_str(text).map_err(|e| YamlError {
        pos: Pos::from_marker(e.marker()),
        field: FieldPath::root(),
        message: format!("invalid YAML: {}", e.info()),
    })?;
    let mut out = Vec::new();
    for node in docs {
        if matches!(node.data, YamlData::Value(Scalar::Null) | YamlData::BadValue) {
            continue;
        }
        let start = Pos::from_marker(&node.span.start);
        let (value, spots) = convert(&node, &mut FieldPath::root())?;
        out.push(OldDocument { value, start, spots });
    }
    Ok(out)
}

fn convert(node: &MarkedYaml<'_>, path: &mut FieldPath) -> Result<(Value, Spots), YamlError> {
    let here = Pos::from_marker(&node.span.start);
    let fail = |path: &FieldPath, message: &str| YamlError {
        pos: here,
        field: path.clone(),
        message: message.into(),
    };
    Ok(match &node.data {
        YamlData::Value(scalar) => {
            (scalar_value(scalar).ok_or_else(|| fail(path, "numbers must be finite"))?, Spots::scalar(here))
        }
        YamlData::Sequence(items) => {
            let mut out = Vec::new();
            let mut spots = Vec::new();
            for (i, item) in items.iter().enumerate() {
                path.push(Segment::Index(i));
                let (value, item_spots) = convert(item, path)?;
                path.pop();
                out.push(value);
                spots.push(item_spots);
            }
            (Value::Array(out), Spots { value: here, inner: Inner::Sequence(spots) })
        }
        YamlData::Mapping(entries) => {
            let mut out = Map::new();
            let mut spots = Vec::new();
            for (k, v) in entries {
                let key_pos = Pos::from_marker(&k.span.start);
                let key = scalar_key(k).ok_or_else(|| YamlError {
                    pos: key_pos,
                    field: path.clone(),
                    message: "mapping keys must be plain scalars".into(),
                })?;
                if out.contains_key(&key) {
                    return Err(YamlError {
                        pos: key_pos,
                        field: path.key(&key),
                        message: format!("duplicated key `{key}` in mapping"),
                    });
                }
                path.push(Segment::Key(key.clone()));
                let (value, value_spots) = convert(v, path)?;
                path.pop();
                spots.push((key.clone(), key_pos, value_spots));
                out.insert(key, value);
            }
            (Value::Object(out), Spots { value: here, inner: Inner::Mapping(spots) })
        }
        YamlData::Tagged(_, inner) => {
            let (value, mut spots) = convert(inner, path)?;
            spots.value = here;
            (value, spots)
        }
        YamlData::Representation(text, _, _) => (Value::String(text.to_string()), Spots::scalar(here)),
        YamlData::Alias(_) | YamlData::BadValue => {
            return Err(fail(path, "unresolvable YAML node (alias or bad value)"));
        }
    })
}

fn scalar_value(scalar: &Scalar<'_>) -> Option<Value> {
    Some(match scalar {
        Scalar::Null => Value::Null,
        Scalar::Boolean(b) => Value::Bool(*b),
        Scalar::Integer(i) => Value::Number((*i).into()),
        Scalar::FloatingPoint(f) => Value::Number(Number::from_f64(f.0)?),
        Scalar::String(s) => Value::String(s.to_string()),
    })
}

fn scalar_key(node: &MarkedYaml<'_>) -> Option<String> {
    match &node.data {
        YamlData::Value(Scalar::String(s)) => Some(s.to_string()),
        YamlData::Value(Scalar::Integer(i)) => Some(i.to_string()),
        YamlData::Value(Scalar::Boolean(b)) => Some(b.to_string()),
        YamlData::Value(Scalar::FloatingPoint(f)) => Some(f.to_string()),
        YamlData::Value(Scalar::Null) => Some("null".to_string()),
        YamlData::Tagged(_, inner) => scalar_key(inner),
        _ => None,
    }
}

/// Every path inside `value`, and one more below each mapping for a field it lacks.
fn paths(value: &Value, path: &mut FieldPath, out: &mut Vec<FieldPath>) {
    out.push(path.clone());
    match value {
        Value::Object(map) => {
            out.push(path.key("missing").key("deeper"));
            for (key, value) in map {
                path.push(Segment::Key(key.clone()));
                paths(value, path, out);
                path.pop();
            }
        }
        Value::Array(items) => {
            out.push(path.index(items.len()));
            for (i, value) in items.iter().enumerate() {
                path.push(Segment::Index(i));
                paths(value, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

/// A document's value, start, and the value and key position of each of its paths.
fn shown(value: &Value, start: Pos, position: impl Fn(&FieldPath) -> (Pos, Pos)) -> String {
    let mut all = Vec::new();
    paths(value, &mut FieldPath::root(), &mut all);
    let mut out = format!("{value} {start:?}\n");
    for path in all {
        out += &format!("  {path} {:?}\n", position(&path));
    }
    out
}

#[track_caller]
fn agree(text: &str) {
    // Large files are parsed on a thread of their own: the same events, the same answer.
    let pipelined = match super::events::read_with(text, true) {
        Ok(docs) => {
            docs.iter().map(|d| shown(&d.value, d.start, |p| (d.value_pos(p), d.key_pos(p)))).collect()
        }
        Err(e) => format!("{e:?}"),
    };
    let new = match parse(text) {
        Ok(docs) => {
            docs.iter().map(|d| shown(&d.value, d.start, |p| (d.value_pos(p), d.key_pos(p)))).collect()
        }
        Err(e) => format!("{e:?}"),
    };
    let old = match parse_with_tree(text) {
        Ok(docs) => docs
            .iter()
            .map(|d| shown(&d.value, d.start, |p| (d.spots.value_pos(p), d.spots.key_pos(p))))
            .collect(),
        Err(e) => format!("{e:?}"),
    };
    assert_eq!(new, old, "on:\n{text}");
    assert_eq!(pipelined, new, "pipelined, on:\n{text}");
}

#[test]
fn awkward_yaml() {
    let cases = [
        "",
        "---\n---\n",
        "~\n---\na: 1\n",
        "--- !foo\n",
        "--- !!int x\n---\na: 1\n",
        "--- !foo .inf\n",
        "5\n",
        "a: .inf\n",
        "a: [1, .nan]\n",
        "a: !foo .inf\n",
        "a: !!int x\n",
        "a: [!!int x]\n",
        // Keys: repeated as YAML, as JSON, typed differently, tagged, not scalars.
        "a: 1\nb: 2\na: 3\n",
        "80: a\n\"80\": b\n",
        "80: a\n\"80\": b\n80: c\n",
        "0.0: a\n-0.0: b\n",
        ".nan: a\n.NaN: b\n",
        "!x a: 1\na: 2\n",
        "!x a: 1\n!x a: 2\n",
        "!x a: 1\n!y a: 2\n",
        "? [1, 2]\n: a\n",
        "? [1, 2]\n: a\n? [1, 2]\n: b\n",
        "? {a: 1}\n: x\nb: {c: 1, c: 2}\n",
        "? {a: 1, a: 2}\n: x\n",
        "? [!!int x]\n: y\n",
        "{!!int x: 1, b: 2}\n",
        "{!!int x: 1, b: 2, c: 3}\n",
        "{!!int x: [1, 2], b: .inf}\n",
        "{!!int x: 1, ? [a]}\n",
        "a: {null: 1, ~: 2}\n",
        "a: {true: 1, \"true\": 2}\n",
        // Anchors and aliases.
        "a: &x 1\nb: *x\n",
        "a: &x {p: 1, q: [2, 3]}\nb: *x\nc: [*x, *x]\n",
        "a: &x !t {p: 1}\nb: *x\n",
        "a: &x !t .inf\nb: 1\n",
        "? &k .inf\n: 1\nb: *k\n",
        "? &k [1]\n: 1\n? *k\n: 2\n",
        "? &k a\n: 1\n*k : 2\n",
        "a: &x [*x]\n",
        "a: &x 1\nb: &x [*x]\nc: *x\n",
        "a: &x !!int q\nb: {*x : 1, c: 2}\n",
        "a: &x {p: &y 1}\nb: *y\nc: *x\n",
        "a: &x 1\n---\nb: *x\n",
        "l0: &a [x, x, x, x, x, x, x, x, x, x]\nl1: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n\
         l2: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nl3: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n\
         l4: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nl5: [*e, *e]\n",
        // Errors in order: a later syntax or loader error wins over an earlier conversion error.
        "a: .inf\n---\nb: [1\n",
        "a: .inf\n---\nb: 1\nb: 2\n",
        "a: 1\na: 2\n---\nb: [1\n",
        "? [x]\n: 1\nb: 1\nb: 2\n",
        "a: {b: .inf, b: 1}\n",
        "a: [.inf, {b: 1, b: 2}]\n",
        // Positions: fields out of key order (JSON keeps them sorted).
        "z: 1\nb: {y: 2, a: [3, {q: 1, p: 2}]}\n10: x\n9: y\n\"\": e\n",
        // Flow and block, multi-line strings, document markers.
        "a:\n  - b: |\n      text\n    c: >-\n      folded\n  - 'q'\n",
        "--- \na: 1\n...\n---\nb: [x, {y: z}]\n",
        "a: \"\\u00e9\"\nb: é\n\u{e9}: x\n",
    ];
    for text in cases {
        agree(text);
    }
}

/// splitmix64, as the reader's fuzz test uses: a failure's case reproduces exactly.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % n.max(1) as u64) as usize
    }
}

/// `text` with a few pieces of YAML syntax put in, lines dropped or repeated.
fn mutated(rng: &mut Rng, text: &str) -> String {
    const PIECES: [&str; 24] = [
        ":", " ", "- ", "[", "]", "{", "}", ",", "\n", "  ", "&a ", "*a", "&b ", "*b", "!!int ", "!x ", "? ",
        "\"", "'", "---\n", "-0.0", ".inf", "~", "#",
    ];
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    for _ in 0..1 + rng.below(4) {
        let at = rng.below(lines.len());
        match rng.below(4) {
            0 if !lines.is_empty() => {
                lines.remove(at);
            }
            1 if !lines.is_empty() => {
                let line = lines[at].clone();
                lines.insert(rng.below(lines.len()), line);
            }
            _ => {
                let Some(line) = lines.get_mut(at) else { continue };
                let mut chars: Vec<char> = line.chars().collect();
                let piece = PIECES[rng.below(PIECES.len())];
                let at = rng.below(chars.len() + 1);
                let end = (at + rng.below(3)).min(chars.len());
                chars.splice(at..end, piece.chars());
                *line = chars.into_iter().collect();
            }
        }
    }
    lines.join("\n") + "\n"
}

#[test]
fn shipped_scenarios_and_mutations_of_them() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("scenarios/")
        .map(|e| e.expect("listing").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let seeds: Vec<String> = files.iter().map(|f| std::fs::read_to_string(f).expect("readable")).collect();
    for text in &seeds {
        agree(text);
    }
    // More with `PACKETPROOF_YAML_CASES=300000 cargo test --release -p packetproof --lib against_tree`.
    let cases = std::env::var("PACKETPROOF_YAML_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(1_000);
    let mut rng = Rng(7);
    for _ in 0..cases {
        let seed = &seeds[rng.below(seeds.len())];
        agree(&mutated(&mut rng, seed));
    }
}
