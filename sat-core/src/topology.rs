//! The topology of a run: the XML of the SAT report's Figure 11.
//!
//! ```xml
//! <?xml version="1.0"?>
//! <!DOCTYPE SAT >
//! <SAT xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
//!   <topologies>
//!     <topology id="0" role="0">
//!       <memory capacity="0" />
//!       <clients><intlist>1 2</intlist></clients>
//!     </topology>
//!     <topology id="1" role="1">
//!       <memory capacity="0" />
//!       <servers><intlist>0</intlist></servers>
//!     </topology>
//!     ...
//!   </topologies>
//! </SAT>
//! ```
//!
//! One `<topology>` per process: `id` is the rank, role 0 is a server, any
//! other role a client running the user function registered under that role.
//! A server lists its clients, a client names its one server. Everything is
//! checked before a process starts, and every error names the file, the
//! element and what to change.

use std::fmt;
use std::path::Path;

use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

pub mod ring;

/// A topology that cannot be used: unreadable, malformed XML, or a
/// description that breaks a rule. The message names the file, the element
/// and the way out.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// The file could not be read.
    #[error("{file}: cannot read the topology file: {error}")]
    Read { file: String, error: std::io::Error },

    /// The text is not well-formed XML.
    #[error("{file}: malformed XML at line {line}, column {column} (byte {byte}): {message}")]
    Malformed {
        file: String,
        line: usize,
        column: usize,
        byte: u64,
        message: String,
    },

    /// Well-formed XML that does not describe a valid topology.
    #[error("{file}: {element}: {problem}{}", at_line(*line))]
    Invalid {
        file: String,
        /// The element at fault, as written: `<topology id="2">`.
        element: String,
        /// Line of the element in the file, when the topology came from XML.
        line: Option<usize>,
        problem: String,
    },

    /// The topology does not describe as many processes as the run has.
    #[error(
        "{file}: the topology describes {entries} processes (<topology> ids 0 to {last}) but the run \
         has {ranks}; start {entries} processes (satrun -n {entries}) or make the file describe {ranks}",
        last = .entries.saturating_sub(1)
    )]
    SizeMismatch {
        file: String,
        entries: u32,
        ranks: u32,
    },
    /// The topology cannot describe a service.
    #[error("{file}: not a service topology: {reason}")]
    Service { file: String, reason: String },
}

fn at_line(line: Option<usize>) -> String {
    match line {
        Some(line) => format!(" (at line {line})"),
        None => String::new(),
    }
}

/// How much chunk data a process may keep locally before evicting (LRU).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, bincode::Encode, bincode::Decode)]
pub enum MemoryCapacity {
    /// No limit: `capacity="0"`, or no `<memory>` element at all.
    Unlimited,
    /// At most this many chunks: a plain number (`capacity="10"`, the limit
    /// of 10 chunks of the report's Figure 15c).
    Chunks(u64),
    /// At most this many bytes: a number with a unit (`B`, `KiB`, `MiB`,
    /// `GiB`, `TiB`, `KB`, `MB`, `GB`, `TB`), such as `capacity="64MiB"`.
    Bytes(u64),
}

impl MemoryCapacity {
    /// Parses the value of a `capacity` attribute; the error says what is
    /// accepted.
    pub fn parse(text: &str) -> Result<MemoryCapacity, String> {
        let text = text.trim();
        let digits = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(digits);
        let bad = || {
            format!(
                "capacity \"{text}\" is not 0 (unlimited), a number of chunks (\"10\") or a size \
                 with a unit (\"64MiB\"; units B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)"
            )
        };
        if number.is_empty() {
            return Err(bad());
        }
        let value: u64 = number
            .parse()
            .map_err(|_| format!("capacity \"{text}\" is too large"))?;
        let unit = unit.trim_start();
        let scale: u64 = match unit.to_ascii_lowercase().as_str() {
            "" => return Ok(Self::from_chunks(value)),
            "b" => 1,
            "kib" => 1 << 10,
            "mib" => 1 << 20,
            "gib" => 1 << 30,
            "tib" => 1 << 40,
            "kb" => 1_000,
            "mb" => 1_000_000,
            "gb" => 1_000_000_000,
            "tb" => 1_000_000_000_000,
            _ => return Err(bad()),
        };
        let bytes = value
            .checked_mul(scale)
            .ok_or_else(|| format!("capacity \"{text}\" is too large"))?;
        Ok(if bytes == 0 {
            MemoryCapacity::Unlimited
        } else {
            MemoryCapacity::Bytes(bytes)
        })
    }

    fn from_chunks(chunks: u64) -> MemoryCapacity {
        if chunks == 0 {
            MemoryCapacity::Unlimited
        } else {
            MemoryCapacity::Chunks(chunks)
        }
    }
}

impl fmt::Display for MemoryCapacity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemoryCapacity::Unlimited => f.write_str("unlimited"),
            MemoryCapacity::Chunks(n) => write!(f, "{n} chunks"),
            MemoryCapacity::Bytes(n) => write!(f, "{n} bytes"),
        }
    }
}

/// One process of the run, one `<topology>` element.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct TopologyEntry {
    /// The rank of the process.
    pub id: u32,
    /// 0 for a server, the user role otherwise.
    pub role: u32,
    pub memory: MemoryCapacity,
    /// For a client, its one server; empty for a server.
    pub servers: Vec<u32>,
    /// For a server, its clients in ascending order; empty for a client.
    pub clients: Vec<u32>,
}

impl TopologyEntry {
    pub fn is_server(&self) -> bool {
        self.role == 0
    }
}

/// A validated topology: one entry per rank, indexed by rank.
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct Topology {
    entries: Vec<TopologyEntry>,
    /// Where the topology came from (a file name, or "default topology"),
    /// for messages.
    source: String,
    /// How many servers keep each chunk's versions: 1 (its home only) or 2
    /// (its home and a backup: `<topologies replication="2">`,
    /// `server/replicas.rs`).
    replication: u32,
}

/// The most servers that keep one chunk's versions.
pub const MAX_REPLICATION: u32 = 2;

/// The name [`Topology::default_for`] gives as its source.
pub const DEFAULT_SOURCE: &str = "default topology";

/// The name [`Topology::service`] gives as its source.
pub const SERVICE_SOURCE: &str = "service topology";

impl Topology {
    /// Reads and validates a topology file; errors name the file as given.
    pub fn from_file(path: &Path) -> Result<Topology, TopologyError> {
        let file = path.display().to_string();
        // Read at most one byte past the limit: a huge file is refused
        // without being read whole.
        let mut bytes = Vec::new();
        let read_error = |error| TopologyError::Read {
            file: file.clone(),
            error,
        };
        // Every process of a run reads the file, the seed again: a pipe
        // (process substitution, a FIFO) would be read once, or block the
        // reader, and a device is no topology.
        let meta = std::fs::metadata(path).map_err(read_error)?;
        if !meta.is_file() {
            use std::os::unix::fs::FileTypeExt;
            let kind = meta.file_type();
            let what = if kind.is_dir() {
                "it is a folder: name the topology file in it"
            } else if kind.is_fifo() || kind.is_socket() {
                "it is a pipe (a FIFO, or process substitution such as <(...)), which only one \
                 process could read once: every process of the run reads the topology, so save \
                 it to a regular file"
            } else {
                "it is a device, not a regular file: save the topology to a file"
            };
            return Err(read_error(std::io::Error::other(what)));
        }
        std::fs::File::open(path)
            .and_then(|f| {
                use std::io::Read;
                f.take(MAX_TOPOLOGY_BYTES as u64 + 1)
                    .read_to_end(&mut bytes)
            })
            .map_err(read_error)?;
        if bytes.len() > MAX_TOPOLOGY_BYTES {
            return Err(TopologyError::Malformed {
                file,
                line: 1,
                column: 1,
                byte: MAX_TOPOLOGY_BYTES as u64,
                message: format!(
                    "the file has more than {MAX_TOPOLOGY_BYTES} bytes; a topology has at most \
                     that (is this the right file?)"
                ),
            });
        }
        let xml = String::from_utf8(bytes).map_err(|e| {
            let bad = e.utf8_error().valid_up_to();
            let before = &e.as_bytes()[..bad];
            let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
            // In characters, as the parser's own errors count them.
            let line_start = before
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |n| n + 1);
            let column = std::str::from_utf8(&before[line_start..])
                .map_or(bad - line_start, |s| s.chars().count())
                + 1;
            TopologyError::Malformed {
                file: file.clone(),
                line,
                column,
                byte: bad as u64,
                message: "the file is not UTF-8 text: SAT reads topologies as UTF-8 (an \
                          encoding declaration does not change that); save it as UTF-8"
                    .into(),
            }
        })?;
        Topology::parse(&xml, &file)
    }

    /// Parses and validates the XML of a topology; `source` names it in errors.
    pub fn parse(xml: &str, source: &str) -> Result<Topology, TopologyError> {
        // A byte-order mark is not part of the document (lines stay the same).
        let xml = xml.strip_prefix('\u{feff}').unwrap_or(xml);
        let root = parse_tree(xml, source)?;
        let (raw, replication) = interpret(&root, source)?;
        let checked: Vec<Checked<'_>> = raw
            .iter()
            .map(|r| Checked {
                id: r.id,
                role: r.role,
                servers: &r.servers,
                clients: &r.clients,
                label: r.label.clone(),
                line: Some(r.line),
            })
            .collect();
        validate(&checked, source)?;
        let mut entries: Vec<TopologyEntry> = raw
            .into_iter()
            .map(|r| {
                let mut clients = r.clients;
                clients.sort_unstable();
                TopologyEntry {
                    id: r.id,
                    role: r.role,
                    memory: r.memory,
                    servers: r.servers,
                    clients,
                }
            })
            .collect();
        entries.sort_unstable_by_key(|e| e.id);
        let servers = entries.iter().filter(|e| e.is_server()).count() as u32;
        if replication > servers {
            return Err(invalid(
                source,
                "<topologies>",
                root.line,
                format!(
                    "replication=\"{replication}\" but the run has {servers} server(s): each \
                     copy of a chunk needs a server of its own; add servers or lower it"
                ),
            ));
        }
        Ok(Topology {
            entries,
            source: source.to_owned(),
            replication,
        })
    }

    /// The topology used when none is given: rank 0 is the only server and
    /// every other rank is a client of it with role 1.
    pub fn default_for(size: u32) -> Topology {
        let entries = (0..size)
            .map(|id| {
                if id == 0 {
                    TopologyEntry {
                        id,
                        role: 0,
                        memory: MemoryCapacity::Unlimited,
                        servers: Vec::new(),
                        clients: (1..size).collect(),
                    }
                } else {
                    TopologyEntry {
                        id,
                        role: 1,
                        memory: MemoryCapacity::Unlimited,
                        servers: vec![0],
                        clients: Vec::new(),
                    }
                }
            })
            .collect();
        Topology {
            entries,
            source: DEFAULT_SOURCE.to_owned(),
            replication: 1,
        }
    }

    /// The topology of a service (`satrun --serve`) with `servers` servers
    /// (ranks 0 to `servers - 1`) and `slots` client slots after them, dealt
    /// to the servers in turn. A slot is a rank a client takes when it
    /// attaches and gives back when it detaches.
    pub fn service(servers: u32, slots: u32) -> Result<Topology, TopologyError> {
        let servers = servers.max(1);
        let size = servers
            .checked_add(slots)
            .filter(|_| slots > 0)
            .ok_or_else(|| TopologyError::Service {
                file: SERVICE_SOURCE.to_owned(),
                reason: format!(
                    "{slots} client slots: give between 1 and {}",
                    u32::MAX - servers
                ),
            })?;
        let server_of = |client: u32| (client - servers) % servers;
        let entries = (0..size)
            .map(|id| {
                if id < servers {
                    TopologyEntry {
                        id,
                        role: 0,
                        memory: MemoryCapacity::Unlimited,
                        servers: Vec::new(),
                        clients: (servers..size).filter(|&c| server_of(c) == id).collect(),
                    }
                } else {
                    TopologyEntry {
                        id,
                        role: 1,
                        memory: MemoryCapacity::Unlimited,
                        servers: vec![server_of(id)],
                        clients: Vec::new(),
                    }
                }
            })
            .collect();
        Topology::from_entries(entries, SERVICE_SOURCE)
    }

    /// Checks that this topology can serve as a service's: its servers are
    /// the first ranks (they are the processes that start), its clients the
    /// slots after them.
    pub fn check_service(&self) -> Result<(), TopologyError> {
        let servers = self.servers();
        let first_client = self.clients().first().copied();
        if servers.iter().enumerate().any(|(i, &s)| s != i as u32)
            || first_client.is_some_and(|c| c < servers.len() as u32)
        {
            return Err(TopologyError::Service {
                file: self.source.clone(),
                reason: format!(
                    "its servers must have the first ids (0 to {}) and its clients the ids \
                     after them: the servers start with the service and the clients are \
                     slots that processes take when they attach",
                    servers.len().saturating_sub(1)
                ),
            });
        }
        if first_client.is_none() {
            return Err(TopologyError::Service {
                file: self.source.clone(),
                reason: "it has no client entry: each client entry is a slot that one \
                         attached process takes"
                    .into(),
            });
        }
        Ok(())
    }

    /// Builds a topology from entries in any order, checking every rule
    /// (for topologies built in code or received from another process).
    pub fn from_entries(
        mut entries: Vec<TopologyEntry>,
        source: &str,
    ) -> Result<Topology, TopologyError> {
        let checked: Vec<Checked<'_>> = entries
            .iter()
            .map(|e| Checked {
                id: e.id,
                role: e.role,
                servers: &e.servers,
                clients: &e.clients,
                label: format!("<topology id=\"{}\">", e.id),
                line: None,
            })
            .collect();
        validate(&checked, source)?;
        entries.sort_unstable_by_key(|e| e.id);
        for e in &mut entries {
            e.clients.sort_unstable();
        }
        Ok(Topology {
            entries,
            source: source.to_owned(),
            replication: 1,
        })
    }

    /// This topology with `replication` copies of each chunk (see the
    /// field); an error when the run has fewer servers than that or more is
    /// asked than SAT keeps.
    pub fn with_replication(mut self, replication: u32) -> Result<Topology, TopologyError> {
        let servers = self.servers().len() as u32;
        if !(1..=MAX_REPLICATION).contains(&replication) || replication > servers {
            return Err(TopologyError::Service {
                file: self.source.clone(),
                reason: format!(
                    "replication {replication}: give 1 to {} (one copy per server, at most \
                     {MAX_REPLICATION})",
                    servers.min(MAX_REPLICATION)
                ),
            });
        }
        self.replication = replication;
        Ok(self)
    }

    /// How many servers keep each chunk's versions (see the field).
    pub fn replication(&self) -> u32 {
        self.replication
    }

    /// Checks every rule again (a decoded topology came over the network).
    pub fn validate(&self) -> Result<(), TopologyError> {
        Topology::from_entries(self.entries.clone(), &self.source)?
            .with_replication(self.replication)
            .map(|_| ())
    }

    /// Checks that the run has exactly one process per `<topology>` entry.
    pub fn check_size(&self, size: u32) -> Result<(), TopologyError> {
        if self.len() == size {
            Ok(())
        } else {
            Err(TopologyError::SizeMismatch {
                file: self.source.clone(),
                entries: self.len(),
                ranks: size,
            })
        }
    }

    /// Where this topology came from: the file name, or [`DEFAULT_SOURCE`].
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The number of processes (ranks) the topology describes.
    pub fn len(&self) -> u32 {
        self.entries.len() as u32
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries, in rank order.
    pub fn entries(&self) -> &[TopologyEntry] {
        &self.entries
    }

    /// The entry of `rank`. Panics if `rank >= self.len()`.
    pub fn entry(&self, rank: u32) -> &TopologyEntry {
        match self.entries.get(rank as usize) {
            Some(e) => e,
            None => panic!(
                "rank {rank} is not in the topology ({} ranks, from {})",
                self.len(),
                self.source
            ),
        }
    }

    /// The entry of `rank`, if it is part of the run.
    pub fn get(&self, rank: u32) -> Option<&TopologyEntry> {
        self.entries.get(rank as usize)
    }

    pub fn role(&self, rank: u32) -> u32 {
        self.entry(rank).role
    }

    pub fn is_server(&self, rank: u32) -> bool {
        self.entry(rank).is_server()
    }

    /// The server ranks, ascending.
    pub fn servers(&self) -> Vec<u32> {
        self.entries
            .iter()
            .filter(|e| e.is_server())
            .map(|e| e.id)
            .collect()
    }

    /// The client ranks, ascending.
    pub fn clients(&self) -> Vec<u32> {
        self.entries
            .iter()
            .filter(|e| !e.is_server())
            .map(|e| e.id)
            .collect()
    }

    /// The server a client is attached to; a server is its own server.
    pub fn server_of(&self, rank: u32) -> u32 {
        let e = self.entry(rank);
        if e.is_server() {
            rank
        } else {
            e.servers[0]
        }
    }

    /// The clients of a server, ascending (empty for a client).
    pub fn clients_of(&self, rank: u32) -> &[u32] {
        &self.entry(rank).clients
    }

    /// The highest role in the topology (the roles table needs that many + 1
    /// entries).
    pub fn max_role(&self) -> u32 {
        self.entries.iter().map(|e| e.role).max().unwrap_or(0)
    }
}

// ---------------------------------------------------------------------------
// XML to a small tree, keeping lines for messages.

struct Node {
    name: String,
    attrs: Vec<(String, String)>,
    children: Vec<Node>,
    /// Text content (character data, CDATA and references as written).
    text: String,
    line: usize,
}

impl Node {
    fn attr(&self, key: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The largest topology document, and the deepest nesting of its elements:
/// a topology is a few elements per rank, and a parser that sees an
/// unbounded document (a wrong file, a hostile one) must neither take
/// quadratic time nor overflow its stack.
pub const MAX_TOPOLOGY_BYTES: usize = 16 << 20;
const MAX_DEPTH: usize = 32;

/// The line of byte offsets met in increasing order, counted once: the
/// newlines between the last offset asked about and this one.
struct Lines {
    at: usize,
    line: usize,
}

impl Lines {
    fn of(&mut self, xml: &str, byte: usize) -> usize {
        let byte = byte.min(xml.len());
        if byte < self.at {
            return line_col(xml, byte).0;
        }
        self.line += xml.as_bytes()[self.at..byte]
            .iter()
            .filter(|&&b| b == b'\n')
            .count();
        self.at = byte;
        self.line
    }
}

/// Line and column (1-based, in characters) of a byte offset.
fn line_col(xml: &str, byte: usize) -> (usize, usize) {
    let byte = byte.min(xml.len());
    let before = xml.get(..byte).unwrap_or(xml);
    let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

fn parse_tree(xml: &str, file: &str) -> Result<Node, TopologyError> {
    let malformed = |byte: u64, message: String| {
        let (line, column) = line_col(xml, byte as usize);
        TopologyError::Malformed {
            file: file.to_owned(),
            line,
            column,
            byte,
            message,
        }
    };
    let mut reader = Reader::from_str(xml);
    let config = reader.config_mut();
    config.check_end_names = true;
    config.trim_text(false);

    if xml.len() > MAX_TOPOLOGY_BYTES {
        return Err(malformed(
            MAX_TOPOLOGY_BYTES as u64,
            format!(
                "the document has {} bytes; a topology has at most {MAX_TOPOLOGY_BYTES} \
                 (is this the right file?)",
                xml.len()
            ),
        ));
    }
    let mut lines = Lines { at: 0, line: 1 };
    let mut stack: Vec<Node> = Vec::new();
    let mut root: Option<Node> = None;
    loop {
        let start = reader.buffer_position();
        let line = lines.of(xml, start as usize);
        let event = reader
            .read_event()
            .map_err(|e| malformed(reader.error_position(), e.to_string()))?;
        match event {
            Event::Start(e) => {
                if stack.len() == MAX_DEPTH {
                    return Err(malformed(
                        start,
                        format!("elements nest more than {MAX_DEPTH} deep"),
                    ));
                }
                let node = start_node(&e, line, file)?;
                if stack.is_empty() && root.is_some() {
                    return Err(malformed(
                        start,
                        format!("second root element <{}>", node.name),
                    ));
                }
                stack.push(node);
            }
            Event::Empty(e) => {
                let node = start_node(&e, line, file)?;
                match stack.last_mut() {
                    Some(parent) => parent.children.push(node),
                    None if root.is_none() => root = Some(node),
                    None => {
                        return Err(malformed(
                            start,
                            format!("second root element <{}>", node.name),
                        ))
                    }
                }
            }
            Event::End(_) => {
                // quick-xml has checked that the name matches the open element.
                let node = stack
                    .pop()
                    .ok_or_else(|| malformed(start, "closing tag without an opening tag".into()))?;
                match stack.last_mut() {
                    Some(parent) => parent.children.push(node),
                    None => root = Some(node),
                }
            }
            Event::Text(t) => {
                let text = t.decode().map_err(|e| malformed(start, e.to_string()))?;
                match stack.last_mut() {
                    Some(node) => node.text.push_str(&text),
                    None if text.trim().is_empty() => {}
                    None => {
                        return Err(malformed(
                            start,
                            format!("text \"{}\" outside the <SAT> element", text.trim()),
                        ))
                    }
                }
            }
            Event::CData(t) => {
                let text = t.decode().map_err(|e| malformed(start, e.to_string()))?;
                match stack.last_mut() {
                    Some(node) => node.text.push_str(&text),
                    None => return Err(malformed(start, "CDATA outside the <SAT> element".into())),
                }
            }
            Event::GeneralRef(r) => {
                let name = r.decode().map_err(|e| malformed(start, e.to_string()))?;
                match stack.last_mut() {
                    Some(node) => {
                        node.text.push('&');
                        node.text.push_str(&name);
                        node.text.push(';');
                    }
                    None => {
                        return Err(malformed(
                            start,
                            format!("reference &{name}; outside the <SAT> element"),
                        ))
                    }
                }
            }
            Event::Decl(_) | Event::DocType(_) | Event::Comment(_) | Event::PI(_) => {}
            Event::Eof => break,
        }
    }
    if let Some(open) = stack.last() {
        return Err(malformed(
            xml.len() as u64,
            format!(
                "the file ends inside <{}> opened at line {}; close it with </{}>",
                open.name, open.line, open.name
            ),
        ));
    }
    root.ok_or_else(|| malformed(xml.len() as u64, "no <SAT> element in the file".into()))
}

fn start_node(e: &BytesStart<'_>, line: usize, file: &str) -> Result<Node, TopologyError> {
    let name = String::from_utf8_lossy(e.name().as_ref()).into_owned();
    let mut attrs = Vec::new();
    for attr in e.attributes() {
        let attr = attr.map_err(|err| TopologyError::Invalid {
            file: file.to_owned(),
            element: format!("<{name}>"),
            line: Some(line),
            problem: format!("malformed attribute: {err}"),
        })?;
        let key = String::from_utf8_lossy(attr.key.as_ref()).into_owned();
        let value = attr
            .unescape_value()
            .map_err(|err| TopologyError::Invalid {
                file: file.to_owned(),
                element: format!("<{name}>"),
                line: Some(line),
                problem: format!("attribute {key}: {err}"),
            })?
            .into_owned();
        attrs.push((key, value));
    }
    Ok(Node {
        name,
        attrs,
        children: Vec::new(),
        text: String::new(),
        line,
    })
}

// ---------------------------------------------------------------------------
// The tree to entries: the elements and attributes of Figure 11, nothing else.

struct RawEntry {
    id: u32,
    role: u32,
    memory: MemoryCapacity,
    servers: Vec<u32>,
    clients: Vec<u32>,
    /// `<topology id="2">`, as written.
    label: String,
    line: usize,
}

fn invalid(file: &str, element: &str, line: usize, problem: String) -> TopologyError {
    TopologyError::Invalid {
        file: file.to_owned(),
        element: element.to_owned(),
        line: Some(line),
        problem,
    }
}

/// Rejects attributes other than `allowed`.
fn only_attrs(node: &Node, label: &str, allowed: &[&str], file: &str) -> Result<(), TopologyError> {
    for (key, value) in &node.attrs {
        if !allowed.contains(&key.as_str()) {
            let expected = if allowed.is_empty() {
                "it takes no attributes".to_owned()
            } else {
                format!("it takes only {}", allowed.join(", "))
            };
            return Err(invalid(
                file,
                label,
                node.line,
                format!("unknown attribute {key}=\"{value}\": {expected}"),
            ));
        }
    }
    Ok(())
}

/// Rejects character data where only elements belong.
fn no_text(node: &Node, label: &str, file: &str) -> Result<(), TopologyError> {
    let text = node.text.trim();
    if text.is_empty() {
        Ok(())
    } else {
        Err(invalid(
            file,
            label,
            node.line,
            format!("unexpected text \"{text}\" in <{}>", node.name),
        ))
    }
}

fn unknown_child(parent_label: &str, child: &Node, expected: &str, file: &str) -> TopologyError {
    invalid(
        file,
        parent_label,
        child.line,
        format!("unknown element <{}>: {expected}", child.name),
    )
}

fn parse_number(
    value: &str,
    what: &str,
    label: &str,
    line: usize,
    file: &str,
) -> Result<u32, TopologyError> {
    let digits = value.trim();
    digits.parse::<u32>().map_err(|_| {
        let problem = if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()) {
            format!(
                "{what}=\"{value}\" is out of range (0 to {} is expected)",
                u32::MAX
            )
        } else {
            format!("{what}=\"{value}\" is not a number (a non-negative integer is expected)")
        };
        invalid(file, label, line, problem)
    })
}

/// The entries, and the replication factor of `<topologies>`.
fn interpret(root: &Node, file: &str) -> Result<(Vec<RawEntry>, u32), TopologyError> {
    if root.name != "SAT" {
        return Err(invalid(
            file,
            &format!("<{}>", root.name),
            root.line,
            "the root element must be <SAT>".into(),
        ));
    }
    for (key, value) in &root.attrs {
        // Namespace declarations and xsi:* schema hints are allowed.
        if !(key == "xmlns" || key.starts_with("xmlns:") || key.starts_with("xsi:")) {
            return Err(invalid(
                file,
                "<SAT>",
                root.line,
                format!(
                    "unknown attribute {key}=\"{value}\": it takes only namespace \
                     declarations (xmlns:...) and xsi:* attributes"
                ),
            ));
        }
    }
    no_text(root, "<SAT>", file)?;
    let mut topologies: Option<&Node> = None;
    for child in &root.children {
        if child.name != "topologies" {
            return Err(unknown_child(
                "<SAT>",
                child,
                "<SAT> contains one <topologies> element",
                file,
            ));
        }
        if topologies.is_some() {
            return Err(invalid(
                file,
                "<topologies>",
                child.line,
                "a second <topologies> element; put every <topology> in one".into(),
            ));
        }
        topologies = Some(child);
    }
    let topologies = topologies.ok_or_else(|| {
        invalid(
            file,
            "<SAT>",
            root.line,
            "no <topologies> element; add <topologies> with one <topology> per process".into(),
        )
    })?;
    only_attrs(topologies, "<topologies>", &["replication"], file)?;
    no_text(topologies, "<topologies>", file)?;
    let replication = match topologies.attrs.iter().find(|(k, _)| k == "replication") {
        None => 1,
        Some((_, value)) => {
            let n = parse_number(value, "replication", "<topologies>", topologies.line, file)?;
            if !(1..=MAX_REPLICATION).contains(&n) {
                return Err(invalid(
                    file,
                    "<topologies>",
                    topologies.line,
                    format!(
                        "replication=\"{value}\": give 1 (each chunk at its home only) to \
                         {MAX_REPLICATION} (and a backup on the next server)"
                    ),
                ));
            }
            n
        }
    };

    let mut entries = Vec::new();
    for node in &topologies.children {
        if node.name != "topology" {
            return Err(unknown_child(
                "<topologies>",
                node,
                "<topologies> contains only <topology> elements",
                file,
            ));
        }
        entries.push(interpret_entry(node, entries.len(), file)?);
    }
    if entries.is_empty() {
        return Err(invalid(
            file,
            "<topologies>",
            topologies.line,
            "no <topology> element; a run needs at least the seed, <topology id=\"0\" role=\"0\">"
                .into(),
        ));
    }
    Ok((entries, replication))
}

fn interpret_entry(node: &Node, index: usize, file: &str) -> Result<RawEntry, TopologyError> {
    let label = match node.attr("id") {
        Some(id) => format!("<topology id=\"{id}\">"),
        None => format!("<topology> number {} (counting from 1)", index + 1),
    };
    only_attrs(node, &label, &["id", "role"], file)?;
    no_text(node, &label, file)?;
    let id = node.attr("id").ok_or_else(|| {
        invalid(
            file,
            &label,
            node.line,
            "no id attribute; add id=\"RANK\"".into(),
        )
    })?;
    let id = parse_number(id, "id", &label, node.line, file)?;
    let role = node.attr("role").ok_or_else(|| {
        invalid(
            file,
            &label,
            node.line,
            "no role attribute; add role=\"0\" for a server or the user role (1, 2, ...) \
             for a client"
                .into(),
        )
    })?;
    let role = parse_number(role, "role", &label, node.line, file)?;

    let mut memory: Option<MemoryCapacity> = None;
    let mut servers: Option<Vec<u32>> = None;
    let mut clients: Option<Vec<u32>> = None;
    for child in &node.children {
        let child_label = format!("{label}: <{}>", child.name);
        let twice = || {
            invalid(
                file,
                &child_label,
                child.line,
                format!("a second <{}> element in the same <topology>", child.name),
            )
        };
        match child.name.as_str() {
            "memory" => {
                if memory.is_some() {
                    return Err(twice());
                }
                only_attrs(child, &child_label, &["capacity"], file)?;
                no_text(child, &child_label, file)?;
                if let Some(grandchild) = child.children.first() {
                    return Err(unknown_child(
                        &child_label,
                        grandchild,
                        "<memory> is empty: <memory capacity=\"0\" />",
                        file,
                    ));
                }
                memory = Some(match child.attr("capacity") {
                    None => MemoryCapacity::Unlimited,
                    Some(text) => MemoryCapacity::parse(text)
                        .map_err(|problem| invalid(file, &child_label, child.line, problem))?,
                });
            }
            "servers" | "clients" => {
                let slot = if child.name == "servers" {
                    &mut servers
                } else {
                    &mut clients
                };
                if slot.is_some() {
                    return Err(twice());
                }
                *slot = Some(interpret_list(child, &child_label, file)?);
            }
            _ => {
                return Err(unknown_child(
                    &label,
                    child,
                    "<topology> contains <memory>, <servers> and <clients>",
                    file,
                ))
            }
        }
    }
    Ok(RawEntry {
        id,
        role,
        memory: memory.unwrap_or(MemoryCapacity::Unlimited),
        servers: servers.unwrap_or_default(),
        clients: clients.unwrap_or_default(),
        label,
        line: node.line,
    })
}

/// `<servers>` or `<clients>`: one `<intlist>` of whitespace-separated ranks.
fn interpret_list(node: &Node, label: &str, file: &str) -> Result<Vec<u32>, TopologyError> {
    only_attrs(node, label, &[], file)?;
    no_text(node, label, file)?;
    let mut list: Option<Vec<u32>> = None;
    for child in &node.children {
        let child_label = format!("{label}: <{}>", child.name);
        if child.name != "intlist" {
            return Err(unknown_child(
                label,
                child,
                &format!("<{}> contains one <intlist>", node.name),
                file,
            ));
        }
        if list.is_some() {
            return Err(invalid(
                file,
                &child_label,
                child.line,
                "a second <intlist>; put every rank in one, separated by spaces".into(),
            ));
        }
        only_attrs(child, &child_label, &[], file)?;
        if let Some(grandchild) = child.children.first() {
            return Err(unknown_child(
                &child_label,
                grandchild,
                "<intlist> holds ranks separated by spaces",
                file,
            ));
        }
        let mut ranks = Vec::new();
        for word in child.text.split_whitespace() {
            let rank = word.parse::<u32>().map_err(|_| {
                invalid(
                    file,
                    &child_label,
                    child.line,
                    format!("\"{word}\" is not a rank; <intlist> holds ranks separated by spaces"),
                )
            })?;
            if ranks.contains(&rank) {
                return Err(invalid(
                    file,
                    &child_label,
                    child.line,
                    format!("rank {rank} is listed twice"),
                ));
            }
            ranks.push(rank);
        }
        list = Some(ranks);
    }
    Ok(list.unwrap_or_default())
}

// ---------------------------------------------------------------------------
// The rules, shared by parsed files and entries built in code.

struct Checked<'a> {
    id: u32,
    role: u32,
    servers: &'a [u32],
    clients: &'a [u32],
    label: String,
    line: Option<usize>,
}

fn validate(entries: &[Checked<'_>], file: &str) -> Result<(), TopologyError> {
    let fail = |e: &Checked<'_>, problem: String| TopologyError::Invalid {
        file: file.to_owned(),
        element: e.label.clone(),
        line: e.line,
        problem,
    };
    let where_ = |e: &Checked<'_>| match e.line {
        Some(line) => format!("{} at line {line}", e.label),
        None => e.label.clone(),
    };
    if entries.is_empty() {
        return Err(TopologyError::Invalid {
            file: file.to_owned(),
            element: "<topologies>".into(),
            line: None,
            problem: "no <topology> entry; a run needs at least the seed server".into(),
        });
    }
    let n = entries.len();

    // Ids: unique, then exactly 0..n-1.
    let mut by_id: Vec<Option<&Checked<'_>>> = vec![None; n];
    for e in entries {
        if (e.id as usize) < n {
            if let Some(first) = by_id[e.id as usize] {
                return Err(fail(
                    e,
                    format!(
                        "id {} is used twice, here and by {}; give every process its own id",
                        e.id,
                        where_(first)
                    ),
                ));
            }
            by_id[e.id as usize] = Some(e);
        }
    }
    for e in entries {
        if e.id as usize >= n {
            // Duplicates among out-of-range ids are reported as duplicates.
            if let Some(first) = entries
                .iter()
                .find(|o| o.id == e.id && !std::ptr::eq(*o, e))
            {
                let (a, b) = if first.line <= e.line {
                    (e, first)
                } else {
                    (first, e)
                };
                return Err(fail(
                    a,
                    format!(
                        "id {} is used twice, here and by {}; give every process its own id",
                        a.id,
                        where_(b)
                    ),
                ));
            }
            let missing: Vec<String> = (0..n)
                .filter(|&i| by_id[i].is_none())
                .map(|i| i.to_string())
                .collect();
            return Err(fail(
                e,
                format!(
                    "id {} is out of range: with {n} <topology> entries the ids are the ranks 0 \
                     to {}, each once (missing: {})",
                    e.id,
                    n - 1,
                    missing.join(" ")
                ),
            ));
        }
    }
    let by_id: Vec<&Checked<'_>> = by_id.into_iter().map(|e| e.expect("ids checked")).collect();

    // The seed.
    let seed = by_id[0];
    if seed.role != 0 {
        return Err(fail(
            seed,
            format!(
                "rank 0 is the seed and must be a server, but it has role=\"{}\"; set role=\"0\"",
                seed.role
            ),
        ));
    }
    let first_server = |e: &Checked<'_>| -> u32 {
        by_id
            .iter()
            .find(|s| s.role == 0 && s.clients.contains(&e.id))
            .map_or(0, |s| s.id)
    };

    // Each entry's own lists.
    for e in entries {
        if e.role == 0 {
            if !e.servers.is_empty() {
                return Err(fail(
                    e,
                    "a server (role 0) names no server in <servers>; servers find each other \
                     through the seed: remove <servers>"
                        .into(),
                ));
            }
            let mut seen = Vec::with_capacity(e.clients.len());
            for &c in e.clients {
                if seen.contains(&c) {
                    return Err(fail(e, format!("client {c} is listed twice in <clients>")));
                }
                seen.push(c);
                let Some(client) = by_id.get(c as usize) else {
                    return Err(fail(
                        e,
                        format!(
                            "<clients> lists {c}, but there is no <topology id=\"{c}\"> \
                             (ranks are 0 to {})",
                            n - 1
                        ),
                    ));
                };
                if client.role == 0 {
                    return Err(fail(
                        e,
                        format!(
                            "<clients> lists {c}, but {} is a server (role 0); a server's \
                             clients have a non-zero role",
                            where_(client)
                        ),
                    ));
                }
            }
        } else {
            if !e.clients.is_empty() {
                return Err(fail(
                    e,
                    format!(
                        "a client (role {}) has no clients of its own; remove <clients>",
                        e.role
                    ),
                ));
            }
            match e.servers {
                [] => {
                    return Err(fail(
                        e,
                        format!(
                            "client names no server in <servers>; add \
                             <servers><intlist>{}</intlist></servers>",
                            first_server(e)
                        ),
                    ))
                }
                [s] => {
                    let Some(server) = by_id.get(*s as usize) else {
                        return Err(fail(
                            e,
                            format!(
                                "<servers> names {s}, but there is no <topology id=\"{s}\"> \
                                 (ranks are 0 to {})",
                                n - 1
                            ),
                        ));
                    };
                    if server.role != 0 {
                        return Err(fail(
                            e,
                            format!(
                                "<servers> names {s}, but {} is a client (role {}), not a \
                                 server (role 0)",
                                where_(server),
                                server.role
                            ),
                        ));
                    }
                }
                many => {
                    let list: Vec<String> = many.iter().map(u32::to_string).collect();
                    return Err(fail(
                        e,
                        format!(
                            "client names {} servers in <servers> ({}); a client is attached to \
                             exactly one server",
                            many.len(),
                            list.join(" ")
                        ),
                    ));
                }
            }
        }
    }

    // Both sides of every attachment agree.
    for e in entries.iter().filter(|e| e.role != 0) {
        let server = by_id[e.servers[0] as usize];
        if !server.clients.contains(&e.id) {
            return Err(fail(
                e,
                format!(
                    "names server {} in <servers>, but {} does not list {} in <clients>; add {} \
                     to the <clients> of <topology id=\"{}\">",
                    server.id,
                    where_(server),
                    e.id,
                    e.id,
                    server.id
                ),
            ));
        }
    }
    for e in entries.iter().filter(|e| e.role == 0) {
        for &c in e.clients {
            let client = by_id[c as usize];
            if client.servers[0] != e.id {
                return Err(fail(
                    e,
                    format!(
                        "lists client {c} in <clients>, but {} names server {} in <servers>; a \
                         client belongs to one server: fix one of the two",
                        where_(client),
                        client.servers[0]
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
