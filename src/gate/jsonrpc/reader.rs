//! Reading a client message in one pass: the parser's output is checked (no object repeats a
//! key, nor holds two keys equal ignoring case), written out again as the bytes the gate
//! forwards, and the fields the gate decides on are noted on the way. Only the values the gate
//! keeps (`id`, `method`, and the params' `name` and progress token) become [`Value`]s; the
//! rest goes from the parser straight into the written message, the arguments included (the
//! call keeps where they were written: [`Arguments`]), so an ungated call builds no maps.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::hash::{BuildHasher, RandomState};
use std::ops::Range;

use bytes::Bytes;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;

use super::{
    Arguments, Incoming, MESSAGE_FIELDS, PARAMS_FIELDS, PROTOCOL_VERSION_META, Rejected, Route,
    ToolCall, UniqueKeys, case_folded,
};

/// A client message as the gate read it.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    /// What it is.
    pub incoming: Incoming,
    /// The message as the gate read it, written out again as UTF-8 JSON: the only bytes the
    /// gate forwards. The upstream gets exactly what the gate saw, whatever escapes, spacing
    /// or number forms the client used: a gated call carries the arguments that were hashed
    /// and shown to the approver (a number a double cannot hold, say
    /// `100000000000000000000001`, arrives as the double the approver saw, not as digits they
    /// never saw).
    pub body: Bytes,
    /// What the MCP 2026-07-28 routing headers (`Mcp-Method`, `Mcp-Name`) may mirror of it.
    pub route: Route,
    /// The id of the request, when the body is one request (a message with a method and a
    /// non-null id): what an answer the gate makes up for it must carry.
    pub request_id: Option<Value>,
}

/// Reads a client message. Every message is fully parsed and refused if another parser could
/// read it differently: if it is not JSON (UTF-8), if any object in it repeats a key or holds
/// two keys equal ignoring case, or if a protocol field is written in another case; a batch
/// holding `tools/list` or `tools/call` is refused as well.
pub fn read(body: &[u8]) -> Result<Message, Rejected> {
    // Written out about as long as it came: one allocation, not one per doubling.
    let mut out = Vec::with_capacity(body.len());
    let mut json = serde_json::Deserializer::from_slice(body);
    let noted = Writer {
        out: &mut out,
        place: Place::Body,
    }
    .deserialize(&mut json)
    // As `serde_json::from_slice`: nothing but whitespace may follow the value.
    .and_then(|noted| json.end().map(|()| noted))
    .map_err(|e| Rejected::Parse(e.to_string()))?;
    let body = Bytes::from(out);
    let mut route = Route::default();
    let mut request_id = None;
    let incoming = match noted {
        Noted::Batch(refused) => {
            if let Some(refused) = refused {
                return Err(refused);
            }
            route.batch = true;
            Incoming::Other
        }
        one => {
            let mut fields = one.into_message();
            if fields.method.is_some() {
                request_id = fields.id.clone().filter(|id| !id.is_null());
            }
            let kind = fields.kind()?;
            route = fields.route();
            match kind {
                Kind::ToolsList => Incoming::ToolsList {
                    id: fields.id.unwrap_or(Value::Null),
                },
                Kind::ToolsCall => Incoming::ToolsCall(fields.into_call(&body)?),
                Kind::Initialize => Incoming::Initialize,
                Kind::Other => Incoming::Other,
            }
        }
    };
    Ok(Message {
        incoming,
        body,
        route,
        request_id,
    })
}

/// Where a value sits in a client message, which decides what is noted of it.
#[derive(Clone, Copy, PartialEq)]
enum Place {
    /// The whole body: a message, or a batch of them.
    Body,
    /// One message of a batch.
    Message,
    /// A message's `params`.
    Params,
    /// The `_meta` of a message's `params`.
    Meta,
    /// Anywhere else: only written out.
    Other,
}

/// What the reader noted of a value.
enum Noted {
    /// Nothing the gate decides on (or not an object where one was expected).
    Nothing,
    /// A message (an object in the body's place or a batch's).
    Message(Fields),
    /// A batch, and why it is refused: its first member that is not a message the gate
    /// reads, or that is `tools/list` or `tools/call` (which a batch may not carry). Only
    /// that is kept of its members, so a batch of many small messages costs no more memory
    /// than its bytes.
    Batch(Option<Rejected>),
    /// A `params` object.
    Params(Params),
    /// A `_meta` object's `progressToken`.
    Meta {
        /// `progressToken`.
        progress_token: Option<Value>,
        /// The MCP 2026-07-28 envelope's protocol version.
        protocol_version: Option<Value>,
    },
}

impl Noted {
    /// The fields of a value read in a message's place; a value that is not an object has
    /// none, and [`Fields::kind`] refuses it.
    fn into_message(self) -> Fields {
        match self {
            Self::Message(fields) => fields,
            _ => Fields::default(),
        }
    }
}

/// What a message is to the gate.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    ToolsList,
    ToolsCall,
    Initialize,
    Other,
}

/// The fields of one message the gate decides on.
#[derive(Default)]
struct Fields {
    /// Whether the message is an object at all.
    object: bool,
    /// The first key that is a protocol field in another case, as the error to give.
    misspelt: Option<String>,
    method: Option<Value>,
    id: Option<Value>,
    /// The params, when they are an object.
    params: Option<Params>,
}

/// The fields of a message's params the gate decides on.
#[derive(Default)]
struct Params {
    /// The first key that is a params field in another case, as the error to give.
    misspelt: Option<String>,
    name: Option<Value>,
    /// `uri`, which `Mcp-Name` mirrors for `resources/read`.
    uri: Option<Value>,
    /// Where `arguments` were written in the message.
    arguments: Option<Range<usize>>,
    /// `_meta.progressToken`, when `_meta` is an object holding one.
    progress_token: Option<Value>,
    /// `_meta`'s protocol version (the 2026-07-28 request envelope).
    protocol_version: Option<Value>,
    /// `requestState`, echoed by a client retrying a call that needed input (2026-07-28).
    request_state: Option<Value>,
    /// Whether it has `inputResponses` (the client's answers in such a retry).
    input_responses: bool,
}

impl Fields {
    /// What the message is, once it is an object, no protocol field in it or in its params is
    /// written in another case, and its method, if any, is a string.
    fn kind(&self) -> Result<Kind, Rejected> {
        if !self.object {
            return Err(Rejected::Invalid("a message must be a JSON object".into()));
        }
        let misspelt = self.misspelt.as_ref().or_else(|| {
            self.params
                .as_ref()
                .and_then(|params| params.misspelt.as_ref())
        });
        if let Some(why) = misspelt {
            return Err(Rejected::Invalid(why.clone()));
        }
        match &self.method {
            None => Ok(Kind::Other),
            Some(Value::String(method)) => Ok(match method.as_str() {
                "tools/list" => Kind::ToolsList,
                "tools/call" => Kind::ToolsCall,
                "initialize" => Kind::Initialize,
                _ => Kind::Other,
            }),
            Some(_) => Err(Rejected::Invalid("method must be a string".into())),
        }
    }

    /// What the routing headers may mirror of this message: its method, if a string, and the
    /// param that `Mcp-Name` names for it (`name` of `tools/call` and `prompts/get`, `uri` of
    /// `resources/read`).
    /// The method and protocol version move into the route: nothing after [`Self::kind`]
    /// reads them.
    fn route(&mut self) -> Route {
        let Some(Value::String(method)) = self.method.take() else {
            return Route::default();
        };
        let params = self.params.as_mut();
        let name = match method.as_str() {
            "tools/call" | "prompts/get" => params.as_ref().and_then(|p| p.name.clone()),
            "resources/read" => params.as_ref().and_then(|p| p.uri.clone()),
            _ => None,
        };
        Route {
            method: Some(method),
            name,
            protocol_version: params.and_then(|p| p.protocol_version.take()),
            batch: false,
        }
    }

    /// The `tools/call` this message is, `body` the message as written: its params must be an
    /// object with a string `name`; absent or null `arguments` are `{}`; a progress token
    /// counts if it is a string or a number.
    fn into_call(self, body: &Bytes) -> Result<ToolCall, Rejected> {
        let Some(params) = self.params else {
            return Err(Rejected::InvalidParams("params must be an object".into()));
        };
        let Some(Value::String(name)) = params.name else {
            return Err(Rejected::InvalidParams(
                "params.name must be a string".into(),
            ));
        };
        Ok(ToolCall {
            id: self.id.unwrap_or(Value::Null),
            name,
            arguments: match params.arguments {
                Some(at) if &body[at.clone()] != b"null" => Arguments::written(body.slice(at)),
                _ => Arguments::empty(),
            },
            progress_token: params
                .progress_token
                .filter(|token| token.is_string() || token.is_number()),
            request_state: params.request_state.map(Box::new),
            input_responses: params.input_responses,
        })
    }
}

/// Writes the value it reads into `out` and notes what `place` asks for.
struct Writer<'o> {
    out: &'o mut Vec<u8>,
    place: Place,
}

impl Writer<'_> {
    fn at(&mut self, place: Place) -> Writer<'_> {
        Writer {
            out: self.out,
            place,
        }
    }

    fn write(&mut self, value: &(impl serde::Serialize + ?Sized)) {
        serde_json::to_writer(&mut *self.out, value).expect("writing JSON to memory cannot fail");
    }

    /// Reads the value of the current key as a [`Value`] the gate keeps, and writes it out.
    fn keep<'de, A: MapAccess<'de>>(&mut self, map: &mut A) -> Result<Value, A::Error> {
        let value = map.next_value_seed(UniqueKeys { fold: true })?;
        self.write(&value);
        Ok(value)
    }
}

impl<'de> DeserializeSeed<'de> for Writer<'_> {
    type Value = Noted;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Noted, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Writer<'_> {
    type Value = Noted;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Noted, E> {
        self.out.extend_from_slice(b"null");
        Ok(Noted::Nothing)
    }

    fn visit_bool<E>(mut self, v: bool) -> Result<Noted, E> {
        self.write(&v);
        Ok(Noted::Nothing)
    }

    fn visit_i64<E>(mut self, v: i64) -> Result<Noted, E> {
        self.write(&v);
        Ok(Noted::Nothing)
    }

    fn visit_u64<E>(mut self, v: u64) -> Result<Noted, E> {
        self.write(&v);
        Ok(Noted::Nothing)
    }

    fn visit_f64<E>(mut self, v: f64) -> Result<Noted, E> {
        // As a `Value` holds it: a number JSON cannot write is null.
        if v.is_finite() {
            self.write(&v);
        } else {
            self.out.extend_from_slice(b"null");
        }
        Ok(Noted::Nothing)
    }

    fn visit_str<E>(mut self, v: &str) -> Result<Noted, E> {
        self.write(v);
        Ok(Noted::Nothing)
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<Noted, A::Error> {
        // An array is a batch only as the whole body; in it, each member is a message.
        let batch = self.place == Place::Body;
        let member = if batch { Place::Message } else { Place::Other };
        let mut refused = None;
        self.out.push(b'[');
        let mut first = true;
        loop {
            if !first {
                self.out.push(b',');
            }
            let Some(noted) = seq.next_element_seed(self.at(member))? else {
                break;
            };
            first = false;
            if batch && refused.is_none() {
                refused = match noted.into_message().kind() {
                    Ok(Kind::ToolsList | Kind::ToolsCall) => Some(Rejected::Batch),
                    Ok(_) => None,
                    Err(why) => Some(why),
                };
            }
        }
        // The comma written for the member that did not come.
        if !first {
            self.out.pop();
        }
        self.out.push(b']');
        Ok(if batch {
            Noted::Batch(refused)
        } else {
            Noted::Nothing
        })
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Noted, A::Error> {
        let mut keys = Keys::default();
        let mut fields = Fields {
            object: true,
            ..Fields::default()
        };
        let mut params = Params::default();
        let mut progress_token = None;
        let mut protocol_version = None;
        let protocol_fields = match self.place {
            Place::Body | Place::Message => MESSAGE_FIELDS,
            Place::Params => PARAMS_FIELDS,
            Place::Meta | Place::Other => &[],
        };
        self.out.push(b'{');
        while let Some(key) = map.next_key_seed(Key)? {
            if !keys.is_empty() {
                self.out.push(b',');
            }
            self.write(&*key);
            self.out.push(b':');
            match (self.place, &*key) {
                (Place::Body | Place::Message, "method") => {
                    fields.method = Some(self.keep(&mut map)?)
                }
                (Place::Body | Place::Message, "id") => fields.id = Some(self.keep(&mut map)?),
                (Place::Body | Place::Message, "params") => {
                    if let Noted::Params(read) = map.next_value_seed(self.at(Place::Params))? {
                        fields.params = Some(read);
                    }
                }
                (Place::Params, "name") => params.name = Some(self.keep(&mut map)?),
                (Place::Params, "arguments") => {
                    // Written and checked as any other value, and not built into a `Value`:
                    // the call holds them as written ([`Arguments`]).
                    let start = self.out.len();
                    map.next_value_seed(self.at(Place::Other))?;
                    params.arguments = Some(start..self.out.len());
                }
                (Place::Params, "uri") => params.uri = Some(self.keep(&mut map)?),
                (Place::Params, "requestState") => {
                    params.request_state = Some(self.keep(&mut map)?)
                }
                (Place::Params, "inputResponses") => {
                    params.input_responses = true;
                    map.next_value_seed(self.at(Place::Other))?;
                }
                (Place::Params, "_meta") => {
                    if let Noted::Meta {
                        progress_token,
                        protocol_version,
                    } = map.next_value_seed(self.at(Place::Meta))?
                    {
                        params.progress_token = progress_token;
                        params.protocol_version = protocol_version;
                    }
                }
                (Place::Meta, "progressToken") => progress_token = Some(self.keep(&mut map)?),
                (Place::Meta, PROTOCOL_VERSION_META) => {
                    protocol_version = Some(self.keep(&mut map)?)
                }
                _ => {
                    map.next_value_seed(self.at(Place::Other))?;
                }
            }
            // Checked once the value is read, so an error names the place a whole-value
            // parser would.
            let form = case_folded(&key);
            if let Some(field) = form
                .as_deref()
                .and_then(|form| protocol_fields.iter().find(|field| **field == form))
            {
                let misspelt = format!("key {:?} is {field:?} in another case", &*key);
                match self.place {
                    Place::Params => params.misspelt.get_or_insert(misspelt),
                    _ => fields.misspelt.get_or_insert(misspelt),
                };
            }
            keys.add(key, form).map_err(de::Error::custom)?;
        }
        self.out.push(b'}');
        Ok(match self.place {
            Place::Body | Place::Message => Noted::Message(fields),
            Place::Params => Noted::Params(params),
            Place::Meta => Noted::Meta {
                progress_token,
                protocol_version,
            },
            Place::Other => Noted::Nothing,
        })
    }
}

/// An object key, borrowed from the message when it holds no escapes.
struct Key;

impl<'de> DeserializeSeed<'de> for Key {
    type Value = Cow<'de, str>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }
}

/// The keys of an object so far with their case-folded forms: a list while the object is
/// small, and indexed by the hash of the form once it has [`INDEX_FROM`] keys, so that a
/// message holding a huge object costs no quadratic time. The index holds hashes, not copies
/// of the keys: an object of many short keys costs a few words a key.
#[derive(Default)]
struct Keys<'de> {
    /// Each key and its folded form, when folding changes it.
    seen: Vec<(Cow<'de, str>, Option<String>)>,
    /// Position in `seen` by the hash of the folded form (the first, when two forms share a
    /// hash), once there are [`INDEX_FROM`] keys.
    index: HashMap<u64, usize>,
    /// Hashes the forms, keyed afresh for each object.
    hasher: RandomState,
}

/// How many keys an object has before [`Keys`] indexes them.
const INDEX_FROM: usize = 16;

/// The folded form of a key of [`Keys::seen`].
fn form_of<'a>((key, form): &'a (Cow<'_, str>, Option<String>)) -> &'a str {
    form.as_deref().unwrap_or(key)
}

impl<'de> Keys<'de> {
    fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }

    /// Adds `key`, whose folded form is `form` (`None`: the key itself), or says why it may
    /// not be added: the object already holds it, or a key equal to it ignoring case.
    fn add(&mut self, key: Cow<'de, str>, form: Option<String>) -> Result<(), String> {
        let folded = form.as_deref().unwrap_or(&key);
        let scan = |seen: &'_ [(Cow<'de, str>, Option<String>)]| -> Option<usize> {
            seen.iter().position(|other| form_of(other) == folded)
        };
        let earlier = if self.seen.len() < INDEX_FROM {
            scan(&self.seen)
        } else {
            match self.index.get(&self.hasher.hash_one(folded)) {
                Some(&at) if form_of(&self.seen[at]) == folded => Some(at),
                // Another form with the same hash: look through them all.
                Some(_) => scan(&self.seen),
                None => None,
            }
        };
        if let Some(at) = earlier {
            let other = &self.seen[at].0;
            return Err(if *other == key {
                format!("duplicate key {:?}", &*key)
            } else {
                format!(
                    "duplicate key {:?}: equal to {:?} ignoring case",
                    &*key, &**other
                )
            });
        }
        if self.seen.len() + 1 >= INDEX_FROM {
            if self.index.is_empty() {
                for (at, other) in self.seen.iter().enumerate() {
                    let hash = self.hasher.hash_one(form_of(other));
                    self.index.entry(hash).or_insert(at);
                }
            }
            let hash = self.hasher.hash_one(folded);
            self.index.entry(hash).or_insert(self.seen.len());
        }
        self.seen.push((key, form));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::super::parse_unique;
    use super::*;

    /// The reading this module replaces, kept as the reference: parse the whole message into
    /// a [`Value`], write that out, and look its fields up.
    fn read_whole(body: &[u8]) -> Result<Message, Rejected> {
        fn method(msg: &Value) -> Result<Option<&str>, Rejected> {
            let Some(object) = msg.as_object() else {
                return Err(Rejected::Invalid("a message must be a JSON object".into()));
            };
            super::super::exact_fields(object, MESSAGE_FIELDS).map_err(Rejected::Invalid)?;
            if let Some(params) = object.get("params").and_then(Value::as_object) {
                super::super::exact_fields(params, PARAMS_FIELDS).map_err(Rejected::Invalid)?;
            }
            match object.get("method") {
                None => Ok(None),
                Some(Value::String(m)) => Ok(Some(m)),
                Some(_) => Err(Rejected::Invalid("method must be a string".into())),
            }
        }
        let msg = parse_unique(body, true)?;
        let body = Bytes::from(serde_json::to_vec(&msg).unwrap());
        let incoming = if let Value::Array(batch) = &msg {
            for m in batch {
                if matches!(method(m)?, Some("tools/list" | "tools/call")) {
                    return Err(Rejected::Batch);
                }
            }
            Incoming::Other
        } else {
            let id = msg.get("id").cloned().unwrap_or(Value::Null);
            match method(&msg)? {
                Some("tools/list") => Incoming::ToolsList { id },
                Some("tools/call") => {
                    let params = msg.get("params").and_then(Value::as_object);
                    let Some(params) = params else {
                        return Err(Rejected::InvalidParams("params must be an object".into()));
                    };
                    let Some(name) = params.get("name").and_then(Value::as_str) else {
                        return Err(Rejected::InvalidParams(
                            "params.name must be a string".into(),
                        ));
                    };
                    let arguments = match params.get("arguments") {
                        None | Some(Value::Null) => json!({}),
                        Some(v) => v.clone(),
                    }
                    .into();
                    let progress_token = params
                        .get("_meta")
                        .and_then(|m| m.get("progressToken"))
                        .filter(|t| t.is_string() || t.is_number())
                        .cloned();
                    Incoming::ToolsCall(ToolCall {
                        id,
                        name: name.to_owned(),
                        arguments,
                        progress_token,
                        request_state: params.get("requestState").cloned().map(Box::new),
                        input_responses: params.contains_key("inputResponses"),
                    })
                }
                Some("initialize") => Incoming::Initialize,
                _ => Incoming::Other,
            }
        };
        let route = match &msg {
            Value::Array(_) => Route {
                batch: true,
                ..Route::default()
            },
            one => match one.get("method").and_then(Value::as_str) {
                None => Route::default(),
                Some(method) => Route {
                    method: Some(method.to_owned()),
                    name: match method {
                        "tools/call" | "prompts/get" => one["params"].get("name").cloned(),
                        "resources/read" => one["params"].get("uri").cloned(),
                        _ => None,
                    },
                    protocol_version: one["params"]
                        .get("_meta")
                        .and_then(|m| m.get(PROTOCOL_VERSION_META))
                        .cloned(),
                    batch: false,
                },
            },
        };
        let request_id = msg
            .get("method")
            .and(msg.get("id"))
            .filter(|id| !id.is_null())
            .cloned();
        Ok(Message {
            incoming,
            body,
            route,
            request_id,
        })
    }

    /// JSON text as clients might send it, written by hand so that it can repeat keys: the
    /// protocol's fields and the tool methods, keys equal ignoring case, escapes, numbers of
    /// every form, objects nested in every place the reader notes.
    fn message() -> impl Strategy<Value = String> {
        let key = prop::sample::select(vec![
            r#""jsonrpc""#,
            r#""id""#,
            r#""method""#,
            r#""params""#,
            r#""name""#,
            r#""arguments""#,
            r#""_meta""#,
            r#""progressToken""#,
            r#""uri""#,
            r#""requestState""#,
            r#""io.modelcontextprotocol/protocolVersion""#,
            r#""inputResponses""#,
            r#""result""#,
            r#""Method""#,
            r#""NAME""#,
            r#""_META""#,
            r#""progresstoken""#,
            r#""para\u006ds""#,
            r#""ſ""#,
            r#""s""#,
            r#""S""#,
            r#""\u212a""#,
            r#""k""#,
            r#""x""#,
        ]);
        let leaf = prop::sample::select(vec![
            "null",
            "true",
            "false",
            "0",
            "-0",
            "-7",
            "1.5e3",
            "18446744073709551616",
            "100000000000000000000001",
            "1E-400",
            r#""tools/call""#,
            r#""tools/list""#,
            r#""initialize""#,
            r#""resources/read""#,
            r#""prompts/get""#,
            r#""tools\/call""#,
            r#""echo""#,
            r#""\ud83d\ude00 é""#,
            r#""""#,
        ])
        .prop_map(str::to_owned);
        leaf.prop_recursive(4, 64, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4)
                    .prop_map(|items| format!("[{}]", items.join(","))),
                prop::collection::vec((key.clone(), inner), 0..6).prop_map(|entries| {
                    let entries: Vec<String> =
                        entries.iter().map(|(k, v)| format!("{k} : {v}")).collect();
                    format!("{{ {} }}", entries.join(", "))
                }),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Whatever the message, reading it in one pass gives what parsing it whole gave: the
        /// same bytes forwarded, the same call, the same refusal (with the same position).
        #[test]
        fn reads_every_message_as_parsing_it_whole_did(text in message()) {
            prop_assert_eq!(read(text.as_bytes()), read_whole(text.as_bytes()), "{}", text);
        }
    }

    #[test]
    fn an_object_with_many_keys_is_checked_through_its_index() {
        let keys: Vec<String> = (0..40).map(|i| format!(r#""k{i}":{i}"#)).collect();
        let body = format!(
            r#"{{"jsonrpc":"2.0","method":"ping","params":{{{}}}}}"#,
            keys.join(",")
        );
        assert_eq!(read(body.as_bytes()).unwrap().body, body.as_bytes());
        for (late, why) in [
            (r#""k3":0"#, r#"duplicate key "k3""#),
            (
                r#""K39":0"#,
                r#"duplicate key "K39": equal to "k39" ignoring case"#,
            ),
            (
                r#""\u212a0":0"#,
                "duplicate key \"\u{212a}0\": equal to \"k0\" ignoring case",
            ),
        ] {
            let body = format!(
                r#"{{"jsonrpc":"2.0","method":"ping","params":{{{},{late}}}}}"#,
                keys.join(",")
            );
            let got = read(body.as_bytes());
            assert!(
                matches!(&got, Err(Rejected::Parse(m)) if m.starts_with(why)),
                "{late}: {got:?}"
            );
        }
    }
}
