//! YAML text → one `serde_json::Value` per document, plus where every field sits in the text.
//!
//! Everything downstream deserializes from the `Value` (so serde and k8s-openapi do the typing)
//! and asks the `Document` for the line and column of a field path to report errors.

use std::fmt;

use saphyr::Marker;
use serde_json::Value;

#[cfg(test)]
mod against_tree;
mod events;

/// A 1-based line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pos {
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
pub enum Segment {
    Key(String),
    Index(usize),
}

/// A path to a field inside one document, printed as `spec.probes[2].to.service`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct FieldPath(Vec<Segment>);

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
                path.0.push(Segment::Key(key.to_string()));
            }
            for index in pieces {
                let index = index.trim_end_matches(']').parse().expect("index in a literal path");
                path.0.push(Segment::Index(index));
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

    /// Descends into `segment` in place (see [`FieldPath::pop`]).
    pub fn push(&mut self, segment: Segment) {
        self.0.push(segment);
    }

    /// Back up from the last [`FieldPath::push`].
    pub fn pop(&mut self) {
        self.0.pop();
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

/// A [`Pos`] as documents keep them, by the million: in half the room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Place {
    line: u32,
    column: u32,
}

impl Place {
    fn from_marker(m: &Marker) -> Place {
        Place::of(Pos::from_marker(m))
    }

    fn of(pos: Pos) -> Place {
        let narrow = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        Place { line: narrow(pos.line), column: narrow(pos.column) }
    }

    fn pos(self) -> Pos {
        Pos { line: self.line as usize, column: self.column as usize }
    }
}

/// Where a value starts, and where each field's key and value or each item does inside it:
/// the shape of the value, without a path or name per field (files hold fields by the million).
#[derive(Debug, Clone)]
struct Spots {
    value: Place,
    inner: Inner,
}

#[derive(Debug, Clone)]
enum Inner {
    Scalar,
    /// Where each field's key starts, and its value's spots, in the order the value keeps its
    /// fields (serde_json's, by key): a field is found by its key's place among them.
    Mapping(Box<[(Place, Spots)]>),
    Sequence(Box<[Spots]>),
}

impl Spots {
    fn scalar(value: Place) -> Spots {
        Spots { value, inner: Inner::Scalar }
    }

    /// The key position (for a mapping's field) and spots of the value at `path` in `value`
    /// (the value these spots are of), and how many of its segments were found: all of them,
    /// or those of its nearest existing ancestor.
    fn find(&self, value: &Value, path: &FieldPath) -> (Option<Place>, &Spots, usize) {
        let (mut key, mut here, mut value) = (None, self, value);
        for (depth, segment) in path.0.iter().enumerate() {
            let next = match (segment, &here.inner, value) {
                (Segment::Key(k), Inner::Mapping(fields), Value::Object(map)) => {
                    // One walk gives the field's value and its rank, where its spots are.
                    map.iter().enumerate().find(|(_, (name, _))| *name == k).and_then(|(rank, (_, value))| {
                        fields.get(rank).map(|(at, spots)| (Some(*at), spots, value))
                    })
                }
                (Segment::Index(i), Inner::Sequence(items), Value::Array(values)) => {
                    items.get(*i).zip(values.get(*i)).map(|(spots, value)| (None, spots, value))
                }
                _ => None,
            };
            match next {
                Some(found) => (key, here, value) = found,
                None => return (key, here, depth),
            }
        }
        (key, here, path.0.len())
    }
}

/// One YAML document, as JSON, with the position of every field.
#[derive(Debug, Clone)]
pub struct Document {
    pub value: Value,
    pub start: Pos,
    spots: Spots,
}

impl Document {
    /// Where the value at `path` starts; for a missing value, where its nearest existing
    /// ancestor starts (the mapping the field should have been in).
    pub fn value_pos(&self, path: &FieldPath) -> Pos {
        self.spots.find(&self.value, path).1.value.pos()
    }

    /// Where the key of `path` starts (for unknown fields), else as [`Document::value_pos`].
    pub fn key_pos(&self, path: &FieldPath) -> Pos {
        match self.spots.find(&self.value, path) {
            (Some(key), _, depth) if depth == path.0.len() => key.pos(),
            (_, spots, _) => spots.value.pos(),
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
        let (_, spots, depth) = self.spots.find(&self.value, list);
        let items: &[Spots] = match &spots.inner {
            Inner::Sequence(items) if depth == list.0.len() => items,
            _ => &[],
        };
        values
            .iter()
            .enumerate()
            .map(|(i, value)| {
                let spots = items.get(i).cloned().unwrap_or_else(|| Spots::scalar(spots.value));
                Document { value: value.clone(), start: spots.value.pos(), spots }
            })
            .collect()
    }

    /// A document the reader made (a generated Service): every position is `at`, the place in
    /// the file that asked for it.
    pub fn generated(value: Value, at: Pos) -> Document {
        Document { value, start: at, spots: Spots::scalar(Place::of(at)) }
    }

    /// Sets a missing top-level string field (e.g. the `kind` a typed list's items leave out);
    /// messages about it point at the document's start.
    pub fn default_field(&mut self, key: &str, value: &str) {
        let Value::Object(map) = &mut self.value else { return };
        match map.get(key) {
            Some(Value::Null) => {}
            Some(_) => return,
            None => {
                // A field the file lacks has no place of its own: its mapping's, the start.
                if let Inner::Mapping(fields) = &mut self.spots.inner {
                    let rank = map.keys().filter(|name| name.as_str() < key).count();
                    let at = self.spots.value;
                    let mut grown = std::mem::take(fields).into_vec();
                    grown.insert(rank.min(grown.len()), (at, Spots::scalar(at)));
                    *fields = grown.into_boxed_slice();
                }
            }
        }
        map.insert(key.to_string(), Value::String(value.to_string()));
    }
}

/// A problem with the YAML itself, which stops everything else.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlError {
    pub pos: Pos,
    pub field: FieldPath,
    pub message: String,
}

/// Parses every document of `text`; empty documents (a trailing `---`) are left out.
pub fn parse(text: &str) -> Result<Vec<Document>, YamlError> {
    // saphyr rejects duplicate keys, as YAML requires.
    events::read(text)
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
