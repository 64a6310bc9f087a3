//! YAML parser events → documents, each built as the parser reports it: no tree of the whole
//! file is held (a file may hold 100,000 Services), only each document's value and positions.
//!
//! What comes out is what saphyr's tree loader (`MarkedYaml::load_from_str`) followed by a
//! conversion of each tree gave, error for error, as files and their tests rely on:
//! - a syntax error wins over everything; then the first error saphyr's loader finds (a key
//!   repeated, keys compared as YAML compares them; aliases expanding past their budget); then
//!   the first conversion error in the file's order (a non-finite number, a key that is not a
//!   plain scalar, a key repeated once keys are JSON strings, a node saphyr could not type);
//! - an alias stands for its anchor's node as though written again where the alias is;
//! - saphyr's quirks stay: a key it cannot type (`!!int x`) is dropped and the next node taken
//!   for the key; a tagged scalar's content has no position of its own (the file's start).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::rc::Rc;

use saphyr::{Marker, Scalar, ScanError, Yaml, YamlLoader};
use saphyr_parser::{Event, Parser, Span, SpannedEventReceiver};
use serde_json::{Map, Number, Value};

use super::{Document, FieldPath, Inner, Place, Pos, Segment, Spots, YamlError};

/// The nodes aliases may add to a file in all, as saphyr's loader counts and allows them: a
/// "billion laughs" file would otherwise expand without end.
const ALIAS_BUDGET: usize = 100_000;

/// The anchor an alias names when it was recorded before its anchor's node was complete (it
/// named itself): saphyr resolves it to a bad value. Parsers number anchors from 1.
const INCOMPLETE_ANCHOR: usize = 0;

/// Below this size a file is parsed on the calling thread alone; above, the parser runs on a
/// thread of its own and the documents are built from its events as they come, the two halves
/// of the work taking about as long as each other.
const PIPELINE_FROM: usize = 1 << 20;

/// Events handed from the parser's thread at once: few enough hand-offs to cost nothing,
/// small enough to stay in cache.
const BATCH: usize = 1024;

/// Every document of `text`, as [`super::parse`] promises.
pub(super) fn read(text: &str) -> Result<Vec<Document>, YamlError> {
    read_with(text, text.len() >= PIPELINE_FROM)
}

/// [`read`], with the parser on a thread of its own or not.
pub(super) fn read_with(text: &str, pipelined: bool) -> Result<Vec<Document>, YamlError> {
    let mut reader = Reader::default();
    let parsed = if pipelined {
        pipeline(text, &mut reader)
    } else {
        Parser::new_from_str(text).load(&mut reader, true)
    };
    parsed.map_err(|e| invalid(&e))?;
    match (reader.loader_error, reader.conversion_error) {
        (Some(e), _) => Err(invalid(&e)),
        (None, Some(e)) => Err(e),
        (None, None) => Ok(reader.documents),
    }
}

/// Parses `text` on another thread, handing its events to `reader` here in batches.
fn pipeline<'input>(text: &'input str, reader: &mut Reader<'input>) -> Result<(), ScanError> {
    use std::sync::mpsc::sync_channel;
    std::thread::scope(|scope| {
        // Two batches in flight: the parser never waits long, nor runs far ahead.
        let (send, receive) = sync_channel(2);
        // Emptied batches go back to be filled again: a new one each time would be fresh
        // memory for the kernel to clear, by the hundred megabytes for a large file.
        let (give_back, given_back) = sync_channel(3);
        let parser = std::thread::Builder::new()
            .name("yaml-parser".into())
            .spawn_scoped(scope, move || {
                let mut batches = Batches { send, given_back, batch: Vec::with_capacity(BATCH) };
                let parsed = Parser::new_from_str(text).load(&mut batches, true);
                batches.flush();
                parsed
            })
            .expect("a thread for the YAML parser");
        for mut batch in receive {
            for (event, span) in batch.drain(..) {
                reader.on_event(event, span);
            }
            let _ = give_back.try_send(batch);
        }
        parser.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// The parser's events, sent on in batches.
struct Batches<'input> {
    send: std::sync::mpsc::SyncSender<Vec<(Event<'input>, Span)>>,
    given_back: std::sync::mpsc::Receiver<Vec<(Event<'input>, Span)>>,
    batch: Vec<(Event<'input>, Span)>,
}

impl Batches<'_> {
    fn flush(&mut self) {
        let next = self.given_back.try_recv().unwrap_or_else(|_| Vec::with_capacity(BATCH));
        let batch = std::mem::replace(&mut self.batch, next);
        // The reader only goes away once the parser is done.
        let _ = self.send.send(batch);
    }
}

impl<'input> SpannedEventReceiver<'input> for Batches<'input> {
    fn on_event(&mut self, event: Event<'input>, span: Span) {
        self.batch.push((event, span));
        if self.batch.len() == BATCH {
            self.flush();
        }
    }
}

fn invalid(e: &ScanError) -> YamlError {
    YamlError {
        pos: Pos::from_marker(e.marker()),
        field: FieldPath::root(),
        message: format!("invalid YAML: {}", e.info()),
    }
}

#[derive(Default)]
struct Reader<'input> {
    documents: Vec<Document>,
    /// The collections being read, outermost first.
    open: Vec<Open<'input>>,
    /// The current document's node, once read.
    root: Option<Node<'input>>,
    /// The current document's anchors: their nodes' events, to read again at an alias.
    anchors: BTreeMap<usize, Anchor<'input>>,
    /// The events of the anchored nodes being read, innermost last.
    recording: Vec<Vec<(Event<'input>, Span)>>,
    /// How deep inside aliases' nodes the events being read are.
    replaying: usize,
    /// Collections being read as mapping keys, innermost last: saphyr's own loader builds each
    /// to compare with the mapping's other keys (they are refused anyway, so rarely seen).
    key_loaders: Vec<YamlLoader<'input, Yaml<'input>>>,
    alias_budget_used: usize,
    loader_error: Option<ScanError>,
    conversion_error: Option<YamlError>,
}

/// An anchored node's events and its size as saphyr's alias budget counts nodes.
struct Anchor<'input> {
    events: Rc<[(Event<'input>, Span)]>,
    size: usize,
}

/// A collection being read.
struct Open<'input> {
    start: Place,
    anchor: usize,
    /// Where saphyr's loader places the collection on completing it, when an alias stands
    /// for it (else its end's position).
    alias_mark: Option<Marker>,
    /// Inside a mapping key: the conversion never looks there.
    in_key: bool,
    /// The collection is a key; the innermost of `Reader::key_loaders` builds it.
    is_key: bool,
    /// Nodes so far, as saphyr's alias budget counts them.
    size: usize,
    content: Collection<'input>,
}

enum Collection<'input> {
    Sequence {
        values: Vec<Value>,
        spots: Vec<Spots>,
    },
    Mapping {
        values: Map<String, Value>,
        /// Each field's key as YAML compares keys, where it starts, and its value's spots, in
        /// the file's order.
        fields: Vec<(Yaml<'input>, Place, Spots)>,
        /// The key whose value comes next.
        key: Option<Key<'input>>,
    },
}

struct Key<'input> {
    /// As a JSON object's key; none for a key that is not a plain scalar.
    name: Option<String>,
    at: Place,
    /// Where saphyr reports the key repeated.
    mark: Marker,
    yaml: Yaml<'input>,
    /// The name of an earlier key or not a plain scalar: YAML may find the key repeated.
    may_repeat: bool,
    /// The key gave the conversion error: taken back if the key ends up without a value.
    failed: bool,
}

/// A node read whole.
struct Node<'input> {
    at: Place,
    /// Where saphyr's loader placed it on completing it.
    mark: Marker,
    size: usize,
    content: Content<'input>,
}

enum Content<'input> {
    Scalar(Yaml<'input>),
    /// `yaml` is the collection as YAML compares it, for a key.
    Collection {
        value: Value,
        spots: Spots,
        yaml: Option<Yaml<'input>>,
    },
}

impl<'input> SpannedEventReceiver<'input> for Reader<'input> {
    fn on_event(&mut self, event: Event<'input>, span: Span) {
        // saphyr's loader ignores what follows its first error; the parser still reports a
        // syntax error after it, which wins.
        if self.loader_error.is_some() {
            return;
        }
        match event {
            Event::DocumentEnd => self.end_document(),
            Event::Nothing | Event::StreamStart | Event::StreamEnd | Event::DocumentStart(_) => {}
            event => {
                self.record(&event, span);
                self.event(event, span, false);
            }
        }
    }
}

impl<'input> Reader<'input> {
    /// Keeps the event for the anchored nodes it is part of, starting with its own.
    fn record(&mut self, event: &Event<'input>, span: Span) {
        if let Event::Scalar(_, _, anchor, _)
        | Event::SequenceStart(anchor, _)
        | Event::MappingStart(anchor, _) = *event
            && anchor != 0
        {
            self.recording.push(Vec::new());
        }
        if self.recording.is_empty() {
            return;
        }
        let event = match *event {
            Event::Alias(id) if !self.anchors.contains_key(&id) => Event::Alias(INCOMPLETE_ANCHOR),
            ref event => event.clone(),
        };
        for events in &mut self.recording {
            events.push((event.clone(), span));
        }
    }

    /// `alias_top`: the event starts the node an alias stands for, and `span` is the alias's.
    fn event(&mut self, event: Event<'input>, span: Span, alias_top: bool) {
        if let Event::Alias(id) = event {
            return self.alias(id, span);
        }
        if matches!(event, Event::SequenceStart(..) | Event::MappingStart(..)) && self.awaits_key() {
            self.key_loaders.push(YamlLoader::default());
        }
        for loader in &mut self.key_loaders {
            loader.on_event(event.clone(), span);
        }
        match event {
            Event::Scalar(text, style, anchor, tag) => {
                let yaml = Yaml::value_from_cow_and_metadata(text, style, tag.as_ref());
                self.complete(Node::scalar(yaml, span), anchor);
            }
            Event::SequenceStart(anchor, _) => {
                let content = Collection::Sequence { values: Vec::new(), spots: Vec::new() };
                self.open_collection(span, anchor, alias_top, content);
            }
            Event::MappingStart(anchor, _) => {
                let content = Collection::Mapping { values: Map::new(), fields: Vec::new(), key: None };
                self.open_collection(span, anchor, alias_top, content);
            }
            Event::SequenceEnd | Event::MappingEnd => self.close_collection(span),
            Event::Alias(_)
            | Event::Nothing
            | Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart(_)
            | Event::DocumentEnd => {}
        }
    }

    /// Reads the node an alias stands for again, placed where the alias is.
    fn alias(&mut self, id: usize, span: Span) {
        let Some(anchor) = self.anchors.get(&id) else {
            return self.complete(Node::scalar(Yaml::BadValue, span), 0);
        };
        // An alias inside an anchor's node was counted with that node.
        if self.replaying == 0 {
            if self.alias_budget_used + anchor.size > ALIAS_BUDGET {
                self.loader_error = Some(ScanError::new_str(
                    span.start,
                    "alias expansion exceeded the maximum node budget (possible billion-laughs attack)",
                ));
                return;
            }
            self.alias_budget_used += anchor.size;
        }
        let events = Rc::clone(&anchor.events);
        self.replaying += 1;
        for (i, (event, at)) in events.iter().enumerate() {
            let top = i == 0;
            self.event(event.clone(), if top { span } else { *at }, top);
        }
        self.replaying -= 1;
    }

    fn open_collection(&mut self, span: Span, anchor: usize, alias_top: bool, content: Collection<'input>) {
        let open = Open {
            start: Place::from_marker(&span.start),
            anchor,
            alias_mark: alias_top.then_some(span.start),
            in_key: self.in_key(),
            is_key: self.awaits_key(),
            size: 1,
            content,
        };
        self.open.push(open);
    }

    fn close_collection(&mut self, span: Span) {
        let Some(open) = self.open.pop() else { return };
        let yaml = if open.is_key { self.key_loaders.pop().and_then(built_key) } else { None };
        // Held until the file is read: no room for items that never came.
        let (value, inner) = match open.content {
            Collection::Sequence { mut values, spots } => {
                values.shrink_to_fit();
                (Value::Array(values), Inner::Sequence(spots.into_boxed_slice()))
            }
            Collection::Mapping { values, fields, key } => {
                // A key left without a value (after a dropped one) is dropped too, unconverted.
                if key.is_some_and(|key| key.failed) {
                    self.conversion_error = None;
                }
                (Value::Object(values), Inner::Mapping(in_value_order(fields)))
            }
        };
        let node = Node {
            at: open.start,
            mark: open.alias_mark.unwrap_or(span.start),
            size: open.size,
            content: Content::Collection { value, spots: Spots { value: open.start, inner }, yaml },
        };
        self.complete(node, open.anchor);
    }

    /// Registers a complete node's anchor, and puts the node in its collection or document.
    fn complete(&mut self, node: Node<'input>, anchor: usize) {
        if anchor != 0 && self.replaying == 0 {
            let events = self.recording.pop().unwrap_or_default();
            self.anchors.insert(anchor, Anchor { events: events.into(), size: node.size });
        }
        if self.open.is_empty() {
            self.root = Some(node);
        } else if self.awaits_key() {
            self.set_key(node);
        } else {
            self.add_value(node);
        }
    }

    fn set_key(&mut self, node: Node<'input>) {
        let yaml = match node.content {
            // saphyr's loader takes a key it cannot type for no key, and the next node for the key.
            Content::Scalar(Yaml::BadValue) => return,
            Content::Scalar(yaml) => yaml,
            Content::Collection { yaml, .. } => yaml.unwrap_or(Yaml::BadValue),
        };
        let name = scalar_key(&yaml);
        let depth = self.open.len() - 1;
        let report = !self.open[depth].in_key && self.conversion_error.is_none();
        let Collection::Mapping { values, .. } = &self.open[depth].content else { return };
        let repeated = name.as_ref().is_some_and(|name| values.contains_key(name));
        let error = match &name {
            None => Some((self.path(depth), "mapping keys must be plain scalars".to_string())),
            // e.g. `80:` and `"80":`, distinct to YAML but the same JSON key.
            Some(name) if repeated => {
                Some((self.path(depth).key(name), format!("duplicated key `{name}` in mapping")))
            }
            Some(_) => None,
        };
        let failed = report && error.is_some();
        if let (true, Some((field, message))) = (failed, error) {
            self.conversion_error = Some(YamlError { pos: node.at.pos(), field, message });
        }
        // Equal keys to YAML have one name, but for 0.0 and -0.0.
        let may_repeat = name.is_none() || repeated || is_float_zero(&yaml);
        let key = Key { name, at: node.at, mark: node.mark, yaml, may_repeat, failed };
        if let Collection::Mapping { key: slot, .. } = &mut self.open[depth].content {
            *slot = Some(key);
        }
    }

    fn add_value(&mut self, node: Node<'input>) {
        let size = node.size;
        let (value, spots) = self.convert(node);
        let Some(open) = self.open.last_mut() else { return };
        match &mut open.content {
            Collection::Sequence { values, spots: all } => {
                open.size += size;
                values.push(value);
                all.push(spots);
            }
            Collection::Mapping { values, fields, key } => {
                let Some(key) = key.take() else { return };
                if key.may_repeat && fields.iter().any(|(yaml, ..)| *yaml == key.yaml) {
                    self.loader_error = Some(ScanError::new_str(key.mark, "duplicated key in mapping"));
                    return;
                }
                // The key counts as one node, whatever it holds.
                open.size += 1 + size;
                fields.push((key.yaml, key.at, spots));
                if let Some(name) = key.name {
                    values.insert(name, value);
                }
            }
        }
    }

    /// The value and positions of a node in a value's place; a conversion error is kept if it
    /// is the first and outside keys.
    fn convert(&mut self, node: Node<'input>) -> (Value, Spots) {
        match node.content {
            Content::Collection { value, spots, .. } => (value, spots),
            Content::Scalar(yaml) => {
                let value = scalar_value(&yaml, node.at.pos()).unwrap_or_else(|(pos, message)| {
                    if self.conversion_error.is_none() && !self.in_key() {
                        let field = self.path(self.open.len());
                        self.conversion_error = Some(YamlError { pos, field, message: message.into() });
                    }
                    Value::Null
                });
                (value, Spots::scalar(node.at))
            }
        }
    }

    fn end_document(&mut self) {
        // The parser scopes anchors to their document.
        self.anchors.clear();
        let Some(root) = self.root.take() else { return };
        // An empty document (a trailing `---`), or one saphyr could not type, is left out.
        if matches!(root.content, Content::Scalar(Yaml::Value(Scalar::Null) | Yaml::BadValue)) {
            return;
        }
        let start = root.at.pos();
        let (value, spots) = self.convert(root);
        if self.conversion_error.is_none() {
            self.documents.push(Document { value, start, spots });
        }
    }

    /// Whether the next node is a mapping's key.
    fn awaits_key(&self) -> bool {
        matches!(self.open.last(), Some(Open { content: Collection::Mapping { key: None, .. }, .. }))
    }

    /// Whether the next node is a key or inside one.
    fn in_key(&self) -> bool {
        self.awaits_key() || self.open.last().is_some_and(|open| open.in_key)
    }

    /// The path of the node being read inside the outermost `depth` collections.
    fn path(&self, depth: usize) -> FieldPath {
        let mut path = FieldPath::root();
        for open in &self.open[..depth] {
            match &open.content {
                Collection::Sequence { values, .. } => path.push(Segment::Index(values.len())),
                Collection::Mapping { key: Some(Key { name: Some(name), .. }), .. } => {
                    path.push(Segment::Key(name.clone()))
                }
                Collection::Mapping { .. } => {}
            }
        }
        path
    }
}

impl<'input> Node<'input> {
    fn scalar(yaml: Yaml<'input>, span: Span) -> Self {
        Node {
            at: Place::from_marker(&span.start),
            mark: span.start,
            size: 1,
            content: Content::Scalar(yaml),
        }
    }
}

/// A mapping's spots in the order serde_json keeps its fields (by key), each field's name no
/// longer held; fields without a JSON key (refused) are left out.
fn in_value_order(mut fields: Vec<(Yaml<'_>, Place, Spots)>) -> Box<[(Place, Spots)]> {
    fields.sort_unstable_by(|(a, ..), (b, ..)| key_text(a).cmp(&key_text(b)));
    fields
        .into_iter()
        .filter(|(yaml, ..)| key_text(yaml).is_some())
        .map(|(_, at, spots)| (at, spots))
        .collect()
}

/// The key a key loader built, once fed its end.
fn built_key<'input>(mut loader: YamlLoader<'input, Yaml<'input>>) -> Option<Yaml<'input>> {
    loader.on_event(Event::DocumentEnd, Span::default());
    loader.into_documents().pop()
}

/// A scalar's JSON value, or where and why it has none.
fn scalar_value(yaml: &Yaml<'_>, here: Pos) -> Result<Value, (Pos, &'static str)> {
    match yaml {
        Yaml::Value(scalar) => json_scalar(scalar).ok_or((here, "numbers must be finite")),
        // Application tags (`!foo`) carry nothing Kubernetes understands; keep the content.
        Yaml::Tagged(_, inner) => scalar_value(inner, Pos::from_marker(&Marker::default())),
        _ => Err((here, "unresolvable YAML node (alias or bad value)")),
    }
}

fn json_scalar(scalar: &Scalar<'_>) -> Option<Value> {
    Some(match scalar {
        Scalar::Null => Value::Null,
        Scalar::Boolean(b) => Value::Bool(*b),
        Scalar::Integer(i) => Value::Number((*i).into()),
        Scalar::FloatingPoint(f) => Value::Number(Number::from_f64(f.0)?),
        Scalar::String(s) => Value::String(s.to_string()),
    })
}

fn scalar_key(yaml: &Yaml<'_>) -> Option<String> {
    match yaml {
        Yaml::Value(Scalar::String(s)) => Some(s.to_string()),
        Yaml::Value(Scalar::Integer(i)) => Some(i.to_string()),
        Yaml::Value(Scalar::Boolean(b)) => Some(b.to_string()),
        Yaml::Value(Scalar::FloatingPoint(f)) => Some(f.to_string()),
        Yaml::Value(Scalar::Null) => Some("null".to_string()),
        Yaml::Tagged(_, inner) => scalar_key(inner),
        _ => None,
    }
}

/// [`scalar_key`] without copying a string key.
fn key_text<'a>(yaml: &'a Yaml<'_>) -> Option<Cow<'a, str>> {
    match yaml {
        Yaml::Value(Scalar::String(s)) => Some(Cow::Borrowed(s)),
        Yaml::Tagged(_, inner) => key_text(inner),
        _ => scalar_key(yaml).map(Cow::Owned),
    }
}

fn is_float_zero(yaml: &Yaml<'_>) -> bool {
    match yaml {
        Yaml::Value(Scalar::FloatingPoint(f)) => f.0 == 0.0,
        Yaml::Tagged(_, inner) => is_float_zero(inner),
        _ => false,
    }
}
