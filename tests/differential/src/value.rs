//! A decoded response as a tree of fields, built from the codec's `Debug` output (every
//! kafka-protocol message derives it), then masked, sorted and diffed with field paths.
//!
//! Working on the tree rather than on each response type keeps the masking rules data:
//! one table of field names ([`MASKED`], [`PRESENCE_ONLY`], ...) applies to every API.
//! Invariant: masking and sorting treat both brokers' trees alike, so a difference that
//! survives them is a difference in what the brokers sent.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;

/// A node of a decoded response.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Value {
    /// `None`, or a field absent at this version.
    Null,
    /// A number, bool, enum variant, UUID: any bare token.
    Atom(String),
    /// A string or byte string, unescaped only as far as `Debug` leaves it.
    Str(String),
    /// A sequence.
    List(Vec<Value>),
    /// Named fields in declaration order.
    Struct(Vec<(String, Value)>),
    /// A map (the codec uses maps for record headers).
    Map(Vec<(Value, Value)>),
}

/// Fields whose value legitimately differs between two brokers: replaced by `<masked>`.
pub const MASKED: &[&str] = &[
    "node_id",
    "leader_id",
    "broker_id",
    "coordinator_id",
    "host",
    "port",
    "cluster_id",
    "controller_id",
    "throttle_time_ms",
    "topic_id",
    "leader_epoch",
    "partition_leader_epoch",
    "producer_id",
    "log_append_time_ms",
    // Free text: Kafka fills it for some errors (and "NONE" for some successes), Strand
    // for others; clients show it but never branch on it. The error code is compared.
    "error_message",
];

/// Generated ids: only whether one is there is compared (`<present>` / `<absent>`).
pub const PRESENCE_ONLY: &[&str] = &["member_id", "leader"];

/// Lists of node ids: the length is compared, each element is masked.
pub const NODE_LISTS: &[&str] = &[
    "replica_nodes",
    "isr_nodes",
    "offline_replicas",
    "eligible_leader_replicas",
    "last_known_elr",
    "replicas",
];

/// Not compared at all: unknown tagged fields (ignored by clients), and ApiVersions'
/// version table, which the report prints separately.
pub const DROPPED: &[&str] = &["unknown_tagged_fields", "api_keys"];

/// Lists whose order means something; every other list is sorted before comparing.
pub const ORDERED: &[&str] = &["records", "batches", "synonyms"];

/// Fields that identify an element of a list, most specific first: elements of two lists
/// are matched by the first of these they have, so a missing element is reported as
/// missing instead of shifting every element after it.
const KEY_FIELDS: &[&str] = &[
    "name",
    "topic",
    "partition_index",
    "partition",
    "index",
    "group_id",
    "key",
    "resource_name",
    "config_name",
];

/// Parses `{:?}` output of a kafka-protocol message.
pub fn parse(debug: &str) -> Result<Value, String> {
    let mut p = Parser {
        s: debug.as_bytes(),
        i: 0,
    };
    let v = p.value()?;
    p.ws();
    if p.i != p.s.len() {
        return Err(format!("trailing text at {}: {}", p.i, p.rest()));
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn rest(&self) -> String {
        let end = (self.i + 40).min(self.s.len());
        String::from_utf8_lossy(&self.s[self.i..end]).into_owned()
    }
    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(u8::is_ascii_whitespace) {
            self.i += 1;
        }
    }
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }
    fn eat(&mut self, c: u8) -> Result<(), String> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(format!(
                "expected {:?} at {}: {}",
                c as char,
                self.i,
                self.rest()
            ))
        }
    }
    /// Items separated by `,` up to `close` (a trailing comma is allowed).
    fn seq<T>(
        &mut self,
        close: u8,
        mut item: impl FnMut(&mut Self) -> Result<T, String>,
    ) -> Result<Vec<T>, String> {
        let mut out = Vec::new();
        loop {
            if self.peek() == Some(close) {
                self.i += 1;
                return Ok(out);
            }
            out.push(item(self)?);
            if self.peek() == Some(b',') {
                self.i += 1;
            }
        }
    }
    fn string(&mut self) -> Result<String, String> {
        self.eat(b'"')?;
        let start = self.i;
        while let Some(&c) = self.s.get(self.i) {
            match c {
                b'\\' => self.i += 2,
                b'"' => {
                    let text = String::from_utf8_lossy(&self.s[start..self.i]).into_owned();
                    self.i += 1;
                    return Ok(text);
                }
                _ => self.i += 1,
            }
        }
        Err("unterminated string".into())
    }
    fn token(&mut self) -> String {
        self.ws();
        let start = self.i;
        while self
            .s
            .get(self.i)
            .is_some_and(|c| !b",:{}[]() \"".contains(c))
        {
            self.i += 1;
        }
        String::from_utf8_lossy(&self.s[start..self.i]).into_owned()
    }
    fn value(&mut self) -> Result<Value, String> {
        match self.peek() {
            None => Err("unexpected end".into()),
            Some(b'[') => {
                self.i += 1;
                Ok(Value::List(self.seq(b']', Self::value)?))
            }
            Some(b'{') => {
                self.i += 1;
                let pairs = self.seq(b'}', |p| {
                    let k = p.value()?;
                    p.eat(b':')?;
                    Ok((k, p.value()?))
                })?;
                Ok(Value::Map(pairs))
            }
            Some(b'"') => Ok(Value::Str(self.string()?)),
            Some(b'b') if self.s.get(self.i + 1) == Some(&b'"') => {
                self.i += 1;
                Ok(Value::Str(self.string()?))
            }
            Some(_) => self.named(),
        }
    }
    /// A token, then maybe a struct body or a tuple.
    fn named(&mut self) -> Result<Value, String> {
        let name = self.token();
        if name.is_empty() {
            return Err(format!("unexpected text at {}: {}", self.i, self.rest()));
        }
        match self.peek() {
            Some(b'{') => {
                self.i += 1;
                let fields = self.seq(b'}', |p| {
                    let f = p.token();
                    p.eat(b':')?;
                    Ok((f, p.value()?))
                })?;
                Ok(Value::Struct(fields))
            }
            Some(b'(') => {
                self.i += 1;
                let mut items = self.seq(b')', Self::value)?;
                // Some(x), TopicName(x), BrokerId(x): the wrapper carries no data.
                if items.len() == 1 {
                    Ok(items.pop().expect("one item"))
                } else {
                    Ok(Value::List(items))
                }
            }
            _ if name == "None" => Ok(Value::Null),
            _ => Ok(Value::Atom(name)),
        }
    }
}

/// Replaces the `n`-th `records` field (in `Debug` order) by its decoded record sets.
pub fn expand_records(v: &mut Value, sets: &[Option<Bytes>]) {
    let mut n = 0;
    expand_walk(v, sets, &mut n);
}

fn expand_walk(v: &mut Value, sets: &[Option<Bytes>], n: &mut usize) {
    match v {
        Value::Struct(fields) => {
            for (name, child) in fields {
                if name == "records" && matches!(child, Value::Str(_) | Value::Null) {
                    if let Some(set) = sets.get(*n) {
                        *child = decode_records(set.as_ref());
                    }
                    *n += 1;
                } else {
                    expand_walk(child, sets, n);
                }
            }
        }
        Value::List(items) => items.iter_mut().for_each(|c| expand_walk(c, sets, n)),
        _ => {}
    }
}

fn decode_records(set: Option<&Bytes>) -> Value {
    let Some(bytes) = set else {
        return Value::Null;
    };
    let mut infos = bytes.clone();
    let batches = match RecordBatchDecoder::decode_batch_info(&mut infos) {
        Ok(b) => b,
        Err(e) => return Value::Str(format!("<undecodable batches: {e:#}>")),
    };
    let mut all = bytes.clone();
    let sets = match RecordBatchDecoder::decode_all(&mut all) {
        Ok(s) => s,
        Err(e) => return Value::Str(format!("<undecodable records: {e:#}>")),
    };
    let records: Vec<String> = sets
        .iter()
        .flat_map(|s| s.records.iter())
        .map(|r| format!("{r:?}"))
        .collect();
    let text = format!(
        "Records {{ byte_count: {}, batches: {batches:?}, records: [{}] }}",
        bytes.len(),
        records.join(", ")
    );
    parse(&text).unwrap_or_else(|e| Value::Str(format!("<records: {e}>")))
}

/// Applies the masking tables to every field of the tree.
pub fn mask(v: &mut Value) {
    match v {
        Value::Struct(fields) => {
            fields.retain(|(n, _)| !DROPPED.contains(&n.as_str()));
            for (name, child) in fields.iter_mut() {
                let name = name.as_str();
                if MASKED.contains(&name) {
                    *child = Value::Atom("<masked>".into());
                } else if PRESENCE_ONLY.contains(&name) {
                    *child = presence(child);
                } else if NODE_LISTS.contains(&name) {
                    if let Value::List(items) = child {
                        items
                            .iter_mut()
                            .for_each(|i| *i = Value::Atom("<node>".into()));
                    }
                } else {
                    mask(child);
                }
            }
        }
        Value::List(items) => items.iter_mut().for_each(mask),
        Value::Map(pairs) => pairs.iter_mut().for_each(|(_, c)| mask(c)),
        _ => {}
    }
}

fn presence(v: &Value) -> Value {
    let present = match v {
        Value::Null => false,
        Value::Str(s) => !s.is_empty(),
        _ => true,
    };
    Value::Atom(if present { "<present>" } else { "<absent>" }.into())
}

/// Sorts every list not named in [`ORDERED`], by its elements' key and then rendering.
pub fn sort(v: &mut Value) {
    match v {
        Value::Struct(fields) => {
            for (name, child) in fields.iter_mut() {
                if let (true, Value::List(items)) = (ORDERED.contains(&name.as_str()), &mut *child)
                {
                    items.iter_mut().for_each(sort);
                } else {
                    sort(child);
                }
            }
        }
        Value::List(items) => {
            items.iter_mut().for_each(sort);
            items.sort_by_cached_key(|i| (key_of(i).map(render), render(i)));
        }
        Value::Map(pairs) => {
            pairs.iter_mut().for_each(|(_, c)| sort(c));
            pairs.sort();
        }
        _ => {}
    }
}

fn key_of(v: &Value) -> Option<&Value> {
    let Value::Struct(fields) = v else {
        return None;
    };
    KEY_FIELDS
        .iter()
        .find_map(|k| fields.iter().find(|(n, _)| n == k).map(|(_, v)| v))
}

/// Compact text of a value for the report.
pub fn render(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Atom(a) => a.clone(),
        Value::Str(s) => format!("{s:?}"),
        Value::List(items) => {
            let parts: Vec<String> = items.iter().map(render).collect();
            format!("[{}]", parts.join(", "))
        }
        Value::Struct(fields) => {
            let parts: Vec<String> = fields
                .iter()
                .map(|(n, v)| format!("{n}: {}", render(v)))
                .collect();
            format!("{{{}}}", parts.join(", "))
        }
        Value::Map(pairs) => {
            let parts: Vec<String> = pairs
                .iter()
                .map(|(k, v)| format!("{}: {}", render(k), render(v)))
                .collect();
            format!("{{{}}}", parts.join(", "))
        }
    }
}

/// One field that differs: its path and both values.
#[derive(Debug)]
pub struct Difference {
    /// Dotted path; list elements as `[key]` (their key field) or `[index]`.
    pub path: String,
    /// Strand's value, rendered.
    pub strand: String,
    /// Kafka's value, rendered.
    pub kafka: String,
}

/// Every leaf where `strand` and `kafka` differ.
pub fn diff(strand: &Value, kafka: &Value) -> Vec<Difference> {
    let mut out = Vec::new();
    diff_at("", strand, kafka, &mut out);
    out
}

const MISSING: &str = "<missing>";

fn diff_at(path: &str, a: &Value, b: &Value, out: &mut Vec<Difference>) {
    match (a, b) {
        (Value::Struct(fa), Value::Struct(fb)) => {
            let mut names: Vec<&String> = fa.iter().map(|(n, _)| n).collect();
            names.extend(
                fb.iter()
                    .map(|(n, _)| n)
                    .filter(|n| !fa.iter().any(|(m, _)| m == *n)),
            );
            for n in names {
                let va = fa.iter().find(|(m, _)| m == n).map(|(_, v)| v);
                let vb = fb.iter().find(|(m, _)| m == n).map(|(_, v)| v);
                diff_opt(&join(path, n), va, vb, out);
            }
        }
        (Value::List(la), Value::List(lb)) => diff_lists(path, la, lb, out),
        _ if a == b => {}
        _ => out.push(Difference {
            path: if path.is_empty() {
                "(response)".into()
            } else {
                path.into()
            },
            strand: render(a),
            kafka: render(b),
        }),
    }
}

fn diff_opt(path: &str, a: Option<&Value>, b: Option<&Value>, out: &mut Vec<Difference>) {
    match (a, b) {
        (Some(a), Some(b)) => diff_at(path, a, b, out),
        (None, None) => {}
        (a, b) => out.push(Difference {
            path: path.into(),
            strand: a.map_or(MISSING.into(), render),
            kafka: b.map_or(MISSING.into(), render),
        }),
    }
}

fn diff_lists(path: &str, la: &[Value], lb: &[Value], out: &mut Vec<Difference>) {
    let keyed = |l: &[Value]| -> Option<BTreeMap<String, usize>> {
        let mut m = BTreeMap::new();
        for (i, v) in l.iter().enumerate() {
            // A repeated key cannot identify its element: fall back to positions.
            if m.insert(key_text(key_of(v)?), i).is_some() {
                return None;
            }
        }
        Some(m)
    };
    if let (Some(ka), Some(kb)) = (keyed(la), keyed(lb)) {
        let mut keys: Vec<&String> = ka.keys().collect();
        keys.extend(kb.keys().filter(|k| !ka.contains_key(*k)));
        for k in keys {
            let p = format!("{path}[{k}]");
            diff_opt(
                &p,
                ka.get(k).map(|&i| &la[i]),
                kb.get(k).map(|&i| &lb[i]),
                out,
            );
        }
        return;
    }
    for i in 0..la.len().max(lb.len()) {
        diff_opt(&format!("{path}[{i}]"), la.get(i), lb.get(i), out);
    }
}

/// A key as it appears in a path: strings without their quotes.
fn key_text(v: &Value) -> String {
    match v {
        Value::Str(s) => s.clone(),
        other => render(other),
    }
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.into()
    } else {
        format!("{path}.{field}")
    }
}

/// The value at a dotted path of plain field names (no list steps), unmasked.
pub fn get<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, step| match v {
        Value::Struct(fields) => fields.iter().find(|(n, _)| n == step).map(|(_, c)| c),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(debug: &str, expected: &str) {
        let v = parse(debug).expect("parses");
        assert_eq!(render(&v), expected);
    }

    #[test]
    fn parses_codec_debug_shapes() {
        check(
            r#"R { a: 1, b: Some("x\"y"), c: None, d: [P { i: 0 }], e: {"k": Some(b"v")} }"#,
            r#"{a: 1, b: "x\\\"y", c: null, d: [{i: 0}], e: {"k": "v"}}"#,
        );
        check(
            "U { id: 6ba7b810-9dad-11d1-80b4-00c04fd430c8, e: Creation }",
            "{id: 6ba7b810-9dad-11d1-80b4-00c04fd430c8, e: Creation}",
        );
    }

    #[test]
    fn lists_match_by_key_and_report_missing_elements() {
        let a = parse(r#"R { t: [T { name: "x", e: 0 }, T { name: "y", e: 0 }] }"#).expect("a");
        let b = parse(r#"R { t: [T { name: "y", e: 3 }] }"#).expect("b");
        let d = diff(&a, &b);
        let paths: Vec<&str> = d.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, vec!["t[x]", "t[y].e"]);
    }
}
