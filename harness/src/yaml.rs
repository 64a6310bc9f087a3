//! YAML text → one `serde_json::Value` per document, plus where every field sits in the text.
//!
//! Everything downstream deserializes from the `Value` (so serde and k8s-openapi do the typing)
//! and asks the `Document` for the line and column of a field path to report errors.

use std::collections::HashMap;
use std::fmt;

use saphyr::{LoadableYamlNode, MarkedYaml, Marker, Scalar, YamlData};
use serde_json::{Map, Number, Value};

/// A 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Pos {
    pub line: usize,
    pub column: usize,
}

impl Pos {
    fn from_marker(m: &Marker) -> Pos {
        // saphyr counts lines from 1 and columns from 0.
        Pos { line: m.line().max(1), column: m.col() + 1 }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Segment {
    Key(String),
    Index(usize),
}

/// A path to a field inside one document, printed as `spec.probes[2].to.service`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct FieldPath(Vec<Segment>);

impl FieldPath {
    pub fn root() -> Self {
        FieldPath(Vec::new())
    }

    /// A path written in code, e.g. `"spec.cluster.podCIDR"` or `"spec.ports[0]"`.
    /// Keys containing dots can't be written this way; use [`FieldPath::key`].
    pub fn parse(text: &str) -> Self {
        let mut path = FieldPath::root();
        for part in text.split('.').filter(|p| !p.is_empty()) {
            let mut pieces = part.split('[');
            if let Some(key) = pieces.next().filter(|k| !k.is_empty()) {
                path = path.key(key);
            }
            for index in pieces {
                let index = index.trim_end_matches(']').parse().expect("index in a literal path");
                path = path.index(index);
            }
        }
        path
    }

    pub fn key(&self, key: &str) -> Self {
        let mut p = self.clone();
        p.0.push(Segment::Key(key.to_string()));
        p
    }

    pub fn index(&self, index: usize) -> Self {
        let mut p = self.clone();
        p.0.push(Segment::Index(index));
        p
    }

    /// `self` followed by the path serde_path_to_error reports inside a value at `self`.
    pub fn join_serde(&self, inner: &serde_path_to_error::Path) -> Self {
        let mut p = self.clone();
        for seg in inner.iter() {
            match seg {
                serde_path_to_error::Segment::Seq { index } => p.0.push(Segment::Index(*index)),
                serde_path_to_error::Segment::Map { key } => p.0.push(Segment::Key(key.clone())),
                serde_path_to_error::Segment::Enum { variant } => p.0.push(Segment::Key(variant.clone())),
                serde_path_to_error::Segment::Unknown => {}
            }
        }
        p
    }

    pub fn parent(&self) -> Option<Self> {
        let mut p = self.clone();
        p.0.pop().map(|_| p)
    }

    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }

    /// The value at this path inside `value`, if there is one.
    pub fn lookup<'v>(&self, value: &'v Value) -> Option<&'v Value> {
        self.0.iter().try_fold(value, |v, seg| match seg {
            Segment::Key(k) => v.get(k),
            Segment::Index(i) => v.get(i),
        })
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            match seg {
                Segment::Index(n) => write!(f, "[{n}]")?,
                // Label keys like `kubernetes.io/service-name` would read as several fields.
                Segment::Key(k)
                    if k.is_empty()
                        || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') =>
                {
                    write!(f, "[{k:?}]")?
                }
                Segment::Key(k) if i == 0 => f.write_str(k)?,
                Segment::Key(k) => write!(f, ".{k}")?,
            }
        }
        Ok(())
    }
}

/// Where a field's key and value start.
#[derive(Debug, Clone, Copy)]
struct Spot {
    key: Option<Pos>,
    value: Pos,
}

/// One YAML document, as JSON, with the position of every field.
#[derive(Debug, Clone)]
pub(crate) struct Document {
    pub value: Value,
    pub start: Pos,
    spots: HashMap<FieldPath, Spot>,
}

impl Document {
    /// Where the value at `path` starts; for a missing value, where its nearest existing
    /// ancestor starts (the mapping the field should have been in).
    pub fn value_pos(&self, path: &FieldPath) -> Pos {
        let mut p = Some(path.clone());
        while let Some(path) = p {
            if let Some(spot) = self.spots.get(&path) {
                return spot.value;
            }
            p = path.parent();
        }
        self.start
    }

    /// Where the key of `path` starts (for unknown fields), else as [`Document::value_pos`].
    pub fn key_pos(&self, path: &FieldPath) -> Pos {
        match self.spots.get(path) {
            Some(Spot { key: Some(key), .. }) => *key,
            _ => self.value_pos(path),
        }
    }
}

impl Document {
    /// The items of the sequence at `list`, each a document of its own whose paths start at
    /// the item and whose positions stay those of the file (one pass over the positions).
    pub fn items(&self, list: &FieldPath) -> Vec<Document> {
        let Some(Value::Array(values)) = list.lookup(&self.value) else {
            return Vec::new();
        };
        let depth = list.0.len();
        let mut items: Vec<Document> = values
            .iter()
            .enumerate()
            .map(|(i, value)| {
                let start = self.value_pos(&list.index(i));
                let spots = HashMap::from([(FieldPath::root(), Spot { key: None, value: start })]);
                Document { value: value.clone(), start, spots }
            })
            .collect();
        for (path, spot) in &self.spots {
            if path.0.len() > depth + 1
                && path.0[..depth] == list.0[..]
                && let Segment::Index(i) = path.0[depth]
                && let Some(item) = items.get_mut(i)
            {
                item.spots.insert(FieldPath(path.0[depth + 1..].to_vec()), *spot);
            }
        }
        items
    }

    /// A document the reader made (a generated Service): every position is `at`, the place in
    /// the file that asked for it.
    pub fn generated(value: Value, at: Pos) -> Document {
        Document {
            value,
            start: at,
            spots: HashMap::from([(FieldPath::root(), Spot { key: None, value: at })]),
        }
    }

    /// Sets a missing top-level string field (e.g. the `kind` a typed list's items leave out);
    /// messages about it point at the document's start.
    pub fn default_field(&mut self, key: &str, value: &str) {
        if let Value::Object(map) = &mut self.value
            && map.get(key).is_none_or(Value::is_null)
        {
            map.insert(key.to_string(), Value::String(value.to_string()));
        }
    }
}

/// A problem with the YAML itself, which stops everything else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct YamlError {
    pub pos: Pos,
    pub field: FieldPath,
    pub message: String,
}

/// Parses every document of `text`; empty documents (a trailing `---`) are left out.
pub(crate) fn parse(text: &str) -> Result<Vec<Document>, YamlError> {
    // saphyr rejects duplicate keys by default, as YAML requires.
    let docs = MarkedYaml::load_from_str(text).map_err(|e| YamlError {
        pos: Pos::from_marker(e.marker()),
        field: FieldPath::root(),
        message: format!("invalid YAML: {}", e.info()),
    })?;
    let mut out = Vec::new();
    for node in &docs {
        if matches!(node.data, YamlData::Value(Scalar::Null) | YamlData::BadValue) {
            continue;
        }
        let start = Pos::from_marker(&node.span.start);
        let mut spots = HashMap::new();
        spots.insert(FieldPath::root(), Spot { key: None, value: start });
        let value = convert(node, &FieldPath::root(), &mut spots)?;
        out.push(Document { value, start, spots });
    }
    Ok(out)
}

fn convert(
    node: &MarkedYaml<'_>,
    path: &FieldPath,
    spots: &mut HashMap<FieldPath, Spot>,
) -> Result<Value, YamlError> {
    let here = Pos::from_marker(&node.span.start);
    let fail = |message: String| YamlError { pos: here, field: path.clone(), message };
    Ok(match &node.data {
        YamlData::Value(scalar) => {
            scalar_value(scalar).ok_or_else(|| fail("numbers must be finite".into()))?
        }
        YamlData::Sequence(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let item_path = path.index(i);
                spots
                    .insert(item_path.clone(), Spot { key: None, value: Pos::from_marker(&item.span.start) });
                out.push(convert(item, &item_path, spots)?);
            }
            Value::Array(out)
        }
        YamlData::Mapping(entries) => {
            let mut out = Map::new();
            for (k, v) in entries {
                let key_pos = Pos::from_marker(&k.span.start);
                let key = scalar_key(k).ok_or_else(|| YamlError {
                    pos: key_pos,
                    field: path.clone(),
                    message: "mapping keys must be plain scalars".into(),
                })?;
                let field = path.key(&key);
                if out.contains_key(&key) {
                    // e.g. `80:` and `"80":`, distinct to YAML but the same JSON key.
                    return Err(YamlError {
                        pos: key_pos,
                        field,
                        message: format!("duplicated key `{key}` in mapping"),
                    });
                }
                spots.insert(
                    field.clone(),
                    Spot { key: Some(key_pos), value: Pos::from_marker(&v.span.start) },
                );
                let value = convert(v, &field, spots)?;
                out.insert(key, value);
            }
            Value::Object(out)
        }
        // Application tags (`!foo`) carry nothing Kubernetes understands; keep the content.
        YamlData::Tagged(_, inner) => convert(inner, path, spots)?,
        YamlData::Representation(text, _, _) => Value::String(text.to_string()),
        YamlData::Alias(_) | YamlData::BadValue => {
            return Err(fail("unresolvable YAML node (alias or bad value)".into()));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pos(line: usize, column: usize) -> Pos {
        Pos { line, column }
    }

    #[test]
    fn converts_scalars_with_yaml_1_2_types() {
        let docs = parse("a: 53\nb: \"53\"\nc: on\nd: true\ne: ~\nf: 1.5\n").unwrap();
        assert_eq!(docs.len(), 1);
        assert_eq!(
            docs[0].value,
            serde_json::json!({"a": 53, "b": "53", "c": "on", "d": true, "e": null, "f": 1.5})
        );
    }

    #[test]
    fn records_key_and_value_positions() {
        let text = "spec:\n  probes:\n    - name: x\n      from: {pod: client}\n";
        let doc = &parse(text).unwrap()[0];
        assert_eq!(doc.value_pos(&FieldPath::parse("spec.probes[0].from.pod")), pos(4, 19));
        assert_eq!(doc.key_pos(&FieldPath::parse("spec.probes[0].from")), pos(4, 7));
        assert_eq!(doc.value_pos(&FieldPath::parse("spec.probes[0].name")), pos(3, 13));
        // A missing field points at the mapping that lacks it.
        assert_eq!(doc.value_pos(&FieldPath::parse("spec.probes[0].to.service")), pos(3, 7));
    }

    #[test]
    fn items_are_documents_with_the_files_positions() {
        let text = "kind: List\nitems:\n- kind: Service\n  metadata:\n    name: a\n-   kind: Pod\n    spec: {x: 1}\n";
        let doc = &parse(text).unwrap()[0];
        let items = doc.items(&FieldPath::parse("items"));
        assert_eq!(items.len(), 2);
        assert_eq!(items[0].value["kind"], "Service");
        assert_eq!(items[0].start, pos(3, 3));
        assert_eq!(items[0].value_pos(&FieldPath::parse("metadata.name")), pos(5, 11));
        assert_eq!(items[0].key_pos(&FieldPath::parse("metadata")), pos(4, 3));
        assert_eq!(items[1].key_pos(&FieldPath::parse("spec.x")), pos(7, 12));
        // A missing field points at the item, not at the list.
        assert_eq!(items[1].value_pos(&FieldPath::parse("status.podIP")), pos(6, 5));
        assert!(doc.items(&FieldPath::parse("kind")).is_empty());
    }

    #[test]
    fn skips_empty_documents() {
        let docs = parse("---\na: 1\n---\n# nothing\n---\nb: 2\n---\n").unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[1].start, pos(6, 1));
    }

    #[test]
    fn duplicate_keys_are_errors() {
        let err = parse("a: 1\nb: 2\na: 3\n").unwrap_err();
        assert_eq!(err.pos, pos(3, 1));
        assert!(err.message.contains("duplicated key"), "{}", err.message);
    }

    #[test]
    fn syntax_errors_carry_the_scanner_position() {
        let err = parse("a: 1\nb: [1, 2\nc: 3\n").unwrap_err();
        assert!(err.message.starts_with("invalid YAML: "), "{}", err.message);
        assert!(err.pos.line >= 2, "{err:?}");
    }

    #[test]
    fn paths_print_like_fields() {
        let p = FieldPath::parse("spec.probes[2].to.service");
        assert_eq!(p.to_string(), "spec.probes[2].to.service");
        assert_eq!(
            FieldPath::parse("metadata.labels").key("kubernetes.io/service-name").to_string(),
            "metadata.labels[\"kubernetes.io/service-name\"]"
        );
        assert_eq!(FieldPath::parse("spec.ports[0]").parent().unwrap().to_string(), "spec.ports");
    }
}
