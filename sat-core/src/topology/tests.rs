use super::*;

const FIGURE11: &str = include_str!("../../topologies/figure11.xml");
const TWO_SERVERS: &str = include_str!("../../topologies/two-servers.xml");

fn data(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/topology")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Parses a file of tests/data/topology and returns the error message.
fn error_of(name: &str) -> String {
    match Topology::parse(&data(name), name) {
        Ok(t) => panic!("{name} was accepted: {t:?}"),
        Err(e) => e.to_string(),
    }
}

fn assert_contains(message: &str, parts: &[&str]) {
    for part in parts {
        assert!(
            message.contains(part),
            "message {message:?} does not contain {part:?}"
        );
    }
}

#[test]
fn figure11_as_in_the_paper() {
    let t = Topology::parse(FIGURE11, "figure11.xml").unwrap();
    assert_eq!(t.len(), 3);
    assert_eq!(t.servers(), vec![0]);
    assert_eq!(t.clients(), vec![1, 2]);
    assert_eq!(t.clients_of(0), &[1, 2]);
    assert_eq!(t.server_of(1), 0);
    assert_eq!(t.server_of(2), 0);
    assert_eq!(t.server_of(0), 0);
    assert_eq!(t.role(0), 0);
    assert_eq!(t.role(1), 1);
    assert_eq!(t.role(2), 2);
    assert_eq!(t.max_role(), 2);
    assert!(t.is_server(0) && !t.is_server(1));
    for rank in 0..3 {
        assert_eq!(t.entry(rank).id, rank);
        assert_eq!(t.entry(rank).memory, MemoryCapacity::Unlimited);
    }
    assert_eq!(t.source(), "figure11.xml");
    t.check_size(3).unwrap();
}

/// The listing as the report's text renders it, spaces inside the tags and
/// the namespace URI included, is still the same topology.
#[test]
fn figure11_with_the_reports_spacing() {
    let xml = "<?xml version=\"1.0\"?>\n<!DOCTYPE SAT >\n\
        <SAT xmlns:xsi=\"http :// www.w3.org /2001/ XMLSchema -instance\">\n\
        <topologies >\n<topology id=\"0\" role=\"0\">\n<memory capacity=\"0\" />\n\
        <clients ><intlist >1 2</intlist >\n</clients >\n</topology >\n\
        <topology id=\"1\" role=\"1\">\n<memory capacity=\"0\" />\n\
        <servers ><intlist >0</intlist >\n</servers >\n</topology >\n\
        <topology id=\"2\" role=\"2\">\n<memory capacity=\"0\" />\n\
        <servers ><intlist >0</intlist >\n</servers >\n</topology >\n\
        </topologies >\n</SAT >";
    let spaced = Topology::parse(xml, "spaced").unwrap();
    let clean = Topology::parse(FIGURE11, "spaced").unwrap();
    assert_eq!(spaced, clean);
}

#[test]
fn a_byte_order_mark_is_ignored() {
    let with_bom = format!("\u{feff}{FIGURE11}");
    assert_eq!(
        Topology::parse(&with_bom, "f").unwrap(),
        Topology::parse(FIGURE11, "f").unwrap()
    );
}

#[test]
fn figure11_from_file() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("topologies/figure11.xml");
    let t = Topology::from_file(&path).unwrap();
    assert_eq!(t.len(), 3);
    assert_eq!(t.source(), path.display().to_string());
}

#[test]
fn missing_file_is_named() {
    let err = Topology::from_file(Path::new("/nonexistent/topo.xml")).unwrap_err();
    assert!(matches!(err, TopologyError::Read { .. }));
    assert_contains(&err.to_string(), &["/nonexistent/topo.xml", "cannot read"]);
}

/// Every process reads the topology, the seed twice: a pipe (a FIFO,
/// process substitution) or a folder is refused before anything reads it,
/// saying what to give instead, and a FIFO nobody writes does not block.
#[test]
fn a_pipe_or_a_folder_is_no_topology_file() {
    let dir = std::env::temp_dir().join(format!("sat-topology-kinds-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fifo = dir.join("topo.xml");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo reads the path it is given, a NUL-terminated string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let pipe = Topology::from_file(&fifo).unwrap_err().to_string();
    let folder = Topology::from_file(&dir).unwrap_err().to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_contains(
        &pipe,
        &["topo.xml", "it is a pipe", "save it to a regular file"],
    );
    assert_contains(&folder, &["it is a folder"]);
}

/// A file that is not UTF-8 is named with the line and column of its first
/// bad byte, and told to be saved as UTF-8.
#[test]
fn text_that_is_not_utf8_is_placed() {
    let path = std::env::temp_dir().join(format!("sat-topology-latin1-{}", std::process::id()));
    std::fs::write(
        &path,
        b"<?xml version=\"1.0\" encoding=\"ISO-8859-1\"?>\n<SAT>\n  <!-- caf\xe9 -->\n</SAT>",
    )
    .unwrap();
    let e = Topology::from_file(&path).unwrap_err();
    std::fs::remove_file(&path).unwrap();
    assert!(
        matches!(
            e,
            TopologyError::Malformed {
                line: 3,
                column: 11,
                ..
            }
        ),
        "{e:?}"
    );
    assert_contains(&e.to_string(), &["not UTF-8", "save it as UTF-8"]);
}

#[test]
fn two_servers() {
    let t = Topology::parse(TWO_SERVERS, "two-servers.xml").unwrap();
    assert_eq!(t.len(), 6);
    assert_eq!(t.servers(), vec![0, 1]);
    assert_eq!(t.clients(), vec![2, 3, 4, 5]);
    assert_eq!(t.clients_of(0), &[2, 3]);
    assert_eq!(t.clients_of(1), &[4, 5]);
    assert_eq!(t.clients_of(2), &[] as &[u32]);
    assert_eq!(t.server_of(3), 0);
    assert_eq!(t.server_of(4), 1);
    assert_eq!(t.server_of(1), 1);
    assert_eq!(t.max_role(), 2);
}

#[test]
fn capacities_and_a_server_without_clients() {
    let t = Topology::parse(&data("valid-capacities.xml"), "valid-capacities.xml").unwrap();
    assert_eq!(t.entry(0).memory, MemoryCapacity::Bytes(64 << 20));
    assert_eq!(t.entry(1).memory, MemoryCapacity::Chunks(10));
    assert_eq!(t.entry(2).memory, MemoryCapacity::Unlimited);
    assert_eq!(t.servers(), vec![0, 3]);
    assert_eq!(t.clients_of(3), &[] as &[u32]);
    assert_eq!(t.max_role(), 3);
}

#[test]
fn capacity_units() {
    use MemoryCapacity::*;
    let cases = [
        ("0", Unlimited),
        ("", Unlimited),
        ("10", Chunks(10)),
        (" 7 ", Chunks(7)),
        ("0MiB", Unlimited),
        ("512B", Bytes(512)),
        ("4KiB", Bytes(4096)),
        ("4 KiB", Bytes(4096)),
        ("64MiB", Bytes(64 << 20)),
        ("2GiB", Bytes(2 << 30)),
        ("1TiB", Bytes(1 << 40)),
        ("3KB", Bytes(3_000)),
        ("5MB", Bytes(5_000_000)),
        ("2GB", Bytes(2_000_000_000)),
        ("1TB", Bytes(1_000_000_000_000)),
        ("8mib", Bytes(8 << 20)),
    ];
    for (text, want) in cases {
        if text.is_empty() {
            continue; // an absent attribute, tested through the files
        }
        assert_eq!(MemoryCapacity::parse(text), Ok(want), "{text:?}");
    }
    for bad in [
        "lots",
        "-1",
        "MiB",
        "10 chunks",
        "1.5GiB",
        "99999999999999999999",
    ] {
        assert!(MemoryCapacity::parse(bad).is_err(), "{bad:?} accepted");
    }
    assert!(MemoryCapacity::parse("20000000TiB").is_err());
}

#[test]
fn client_without_server() {
    let m = error_of("client-without-server.xml");
    assert_contains(
        &m,
        &[
            "client-without-server.xml: <topology id=\"2\">: client names no server in <servers>",
            "add <servers><intlist>0</intlist></servers>",
            "line 13",
        ],
    );
}

#[test]
fn duplicate_id_names_both_elements() {
    let m = error_of("duplicate-id.xml");
    assert_contains(
        &m,
        &[
            "<topology id=\"1\">",
            "id 1 is used twice",
            "line 9",
            "line 13",
        ],
    );
}

#[test]
fn ids_are_the_ranks() {
    let m = error_of("id-gap.xml");
    assert_contains(
        &m,
        &[
            "<topology id=\"3\">",
            "out of range",
            "0 to 2",
            "missing: 2",
        ],
    );
}

#[test]
fn seed_must_be_a_server() {
    let m = error_of("seed-not-server.xml");
    assert_contains(&m, &["<topology id=\"0\">", "seed", "role=\"0\""]);
}

#[test]
fn server_must_list_its_client() {
    let m = error_of("server-misses-client.xml");
    assert_contains(
        &m,
        &[
            "<topology id=\"2\">",
            "names server 0",
            "does not list 2 in <clients>",
        ],
    );
}

#[test]
fn client_listed_by_another_server() {
    let m = error_of("client-claimed-by-two-servers.xml");
    assert_contains(
        &m,
        &[
            "<topology id=\"1\">",
            "lists client 2",
            "<topology id=\"2\"> at line",
            "names server 0",
        ],
    );
}

#[test]
fn client_names_a_client_as_server() {
    let m = error_of("client-names-client.xml");
    assert_contains(
        &m,
        &["<topology id=\"2\">", "<servers> names 1", "is a client"],
    );
}

#[test]
fn client_with_two_servers() {
    let m = error_of("client-two-servers.xml");
    assert_contains(
        &m,
        &["<topology id=\"1\">", "2 servers", "exactly one server"],
    );
}

#[test]
fn unknown_element() {
    let m = error_of("unknown-element.xml");
    assert_contains(
        &m,
        &["<topology id=\"1\">", "unknown element <cache>", "line 12"],
    );
}

#[test]
fn unknown_attribute() {
    let m = error_of("unknown-attribute.xml");
    assert_contains(
        &m,
        &[
            "<topology id=\"1\">",
            "unknown attribute name=\"prod\"",
            "id, role",
        ],
    );
}

#[test]
fn malformed_xml_has_a_position() {
    let err = Topology::parse(&data("malformed.xml"), "malformed.xml").unwrap_err();
    let m = err.to_string();
    assert!(
        matches!(err, TopologyError::Malformed { line: 11, .. }),
        "{m}"
    );
    assert_contains(&m, &["malformed.xml: malformed XML at line 11", "byte"]);
}

#[test]
fn unclosed_at_end_of_file() {
    let xml = "<SAT><topologies><topology id=\"0\" role=\"0\">";
    let m = Topology::parse(xml, "cut.xml").unwrap_err().to_string();
    assert_contains(&m, &["cut.xml: malformed XML", "<topology>", "close it"]);
}

#[test]
fn not_xml_at_all() {
    for text in [
        "",
        "hello",
        "<SAT>",
        "<SAT></SAT><SAT></SAT>",
        "<SAT></TAS>",
    ] {
        let err = Topology::parse(text, "junk").unwrap_err();
        assert!(
            matches!(err, TopologyError::Malformed { .. }),
            "{text:?}: {err}"
        );
    }
}

#[test]
fn bad_numbers() {
    assert_contains(
        &error_of("bad-id.xml"),
        &["<topology id=\"one\">", "id=\"one\" is not a number"],
    );
    assert_contains(
        &error_of("bad-capacity.xml"),
        &["<topology id=\"1\">: <memory>", "capacity \"lots\""],
    );
    assert_contains(
        &error_of("bad-intlist.xml"),
        &[
            "<topology id=\"0\">: <clients>: <intlist>",
            "\"x\" is not a rank",
        ],
    );
    let xml = FIGURE11.replace("role=\"2\"", "role=\"-2\"");
    assert_contains(
        &Topology::parse(&xml, "f").unwrap_err().to_string(),
        &["<topology id=\"2\">", "role=\"-2\" is not a number"],
    );
    let xml = FIGURE11.replace("role=\"2\"", "role=\"4294967296\"");
    assert_contains(
        &Topology::parse(&xml, "f").unwrap_err().to_string(),
        &["role=\"4294967296\" is out of range (0 to 4294967295"],
    );
}

#[test]
fn structure_errors() {
    let cases: &[(&str, &[&str])] = &[
        ("<topo/>", &["<topo>", "root element must be <SAT>"]),
        ("<SAT/>", &["<SAT>", "no <topologies>"]),
        ("<SAT><topologies/></SAT>", &["<topologies>", "no <topology>"]),
        ("<SAT foo=\"1\"><topologies/></SAT>", &["unknown attribute foo"]),
        (
            "<SAT><topologies/><topologies/></SAT>",
            &["a second <topologies>"],
        ),
        (
            "<SAT><topologies><topology role=\"0\"/></topologies></SAT>",
            &["<topology> number 1", "no id attribute"],
        ),
        (
            "<SAT><topologies><topology id=\"0\"/></topologies></SAT>",
            &["<topology id=\"0\">", "no role attribute"],
        ),
        (
            "<SAT><topologies><topology id=\"0\" role=\"0\"><memory/><memory/></topology></topologies></SAT>",
            &["<topology id=\"0\">: <memory>", "a second <memory>"],
        ),
        (
            "<SAT><topologies><topology id=\"0\" role=\"0\"><clients>1</clients></topology></topologies></SAT>",
            &["<topology id=\"0\">: <clients>", "unexpected text \"1\""],
        ),
        (
            "<SAT><topologies><topology id=\"0\" role=\"0\"><clients><list>1</list></clients></topology></topologies></SAT>",
            &["<topology id=\"0\">: <clients>", "unknown element <list>"],
        ),
        (
            "<SAT><topologies><topology id=\"0\" role=\"0\"><clients><intlist>1 1</intlist></clients></topology></topologies></SAT>",
            &["listed twice"],
        ),
        (
            "<SAT><topologies><topology id=\"0\" role=\"0\"><clients><intlist>5</intlist></clients></topology></topologies></SAT>",
            &["<clients> lists 5", "no <topology id=\"5\">"],
        ),
        (
            "<SAT><topologies><topology id=\"0\" role=\"0\"><servers><intlist>0</intlist></servers></topology></topologies></SAT>",
            &["a server (role 0) names no server"],
        ),
        (
            "<SAT><topologies><topology id=\"0\" role=\"0\"><clients><intlist>1</intlist></clients></topology>\
             <topology id=\"1\" role=\"1\"><servers><intlist>0</intlist></servers><clients><intlist>0</intlist></clients></topology></topologies></SAT>",
            &["<topology id=\"1\">", "has no clients of its own"],
        ),
        (
            "<SAT><topologies><topology id=\"0\" role=\"0\"><clients><intlist>0</intlist></clients></topology></topologies></SAT>",
            &["<clients> lists 0", "is a server"],
        ),
        (
            "<SAT><topologies><topology id=\"0\" role=\"0\">text</topology></topologies></SAT>",
            &["unexpected text \"text\""],
        ),
    ];
    for (xml, parts) in cases {
        let m = match Topology::parse(xml, "t.xml") {
            Ok(_) => panic!("accepted: {xml}"),
            Err(e) => e.to_string(),
        };
        assert_contains(&m, parts);
    }
}

#[test]
fn entries_may_come_in_any_order() {
    let xml = "<SAT><topologies>\
        <topology id=\"2\" role=\"1\"><servers><intlist>0</intlist></servers></topology>\
        <topology id=\"1\" role=\"1\"><servers><intlist>0</intlist></servers></topology>\
        <topology id=\"0\" role=\"0\"><clients><intlist>2 1</intlist></clients></topology>\
        </topologies></SAT>";
    let t = Topology::parse(xml, "t").unwrap();
    assert_eq!(t, {
        let mut d = Topology::default_for(3);
        d.source = "t".into();
        d
    });
    assert_eq!(t.clients_of(0), &[1, 2]);
}

#[test]
fn default_topology() {
    for size in 1..6 {
        let t = Topology::default_for(size);
        assert_eq!(t.len(), size);
        assert_eq!(t.servers(), vec![0]);
        assert_eq!(t.clients(), (1..size).collect::<Vec<_>>());
        assert_eq!(t.clients_of(0), (1..size).collect::<Vec<_>>().as_slice());
        for c in 1..size {
            assert_eq!(t.role(c), 1);
            assert_eq!(t.server_of(c), 0);
        }
        assert_eq!(t.max_role(), u32::from(size > 1));
        t.validate().unwrap();
        t.check_size(size).unwrap();
    }
}

#[test]
fn size_must_match() {
    let t = Topology::parse(FIGURE11, "figure11.xml").unwrap();
    let m = t.check_size(4).unwrap_err().to_string();
    assert_contains(&m, &["figure11.xml", "describes 3 processes", "has 4"]);
    assert!(t.check_size(2).is_err());
}

#[test]
fn bincode_round_trip() {
    let t = Topology::parse(TWO_SERVERS, "two-servers.xml").unwrap();
    let config = bincode::config::standard();
    let bytes = bincode::encode_to_vec(&t, config).unwrap();
    let (back, used): (Topology, usize) = bincode::decode_from_slice(&bytes, config).unwrap();
    assert_eq!(used, bytes.len());
    assert_eq!(back, t);
    back.validate().unwrap();
}

#[test]
fn from_entries_checks_the_rules() {
    let mut entries = Topology::default_for(3).entries().to_vec();
    entries[2].servers.clear();
    let m = Topology::from_entries(entries, "decoded")
        .unwrap_err()
        .to_string();
    assert_contains(&m, &["decoded: <topology id=\"2\">", "names no server"]);
}

/// A document nested deeper than any topology, or larger than one, is
/// refused with an error saying so, never a stack overflow; line numbers
/// in errors stay right with the line counting done once (a document of
/// many lines whose error sits at its end).
#[test]
fn deep_or_huge_documents_are_refused_and_lines_stay_right() {
    let deep = format!("{}{}", "<a>".repeat(100_000), "</a>".repeat(100_000));
    let e = Topology::parse(&deep, "deep.xml").unwrap_err().to_string();
    assert_contains(&e, &["deep.xml", "nest more than 32 deep"]);
    let huge = " ".repeat(super::MAX_TOPOLOGY_BYTES + 1);
    let e = Topology::parse(&huge, "huge.xml").unwrap_err().to_string();
    assert_contains(&e, &["huge.xml", "at most"]);
    let dir = std::env::temp_dir().join(format!("sat-topology-huge-{}", std::process::id()));
    std::fs::write(&dir, &huge).unwrap();
    let e = Topology::from_file(&dir).unwrap_err().to_string();
    std::fs::remove_file(&dir).unwrap();
    assert_contains(&e, &["more than", "bytes"]);
    let many_lines = format!("<SAT>{}<oops></SAT>", "\n".repeat(50_000));
    let e = Topology::parse(&many_lines, "lines.xml")
        .unwrap_err()
        .to_string();
    assert_contains(&e, &["lines.xml", "line 50001"]);
}

#[test]
fn replication_is_read_from_topologies_and_checked_against_the_servers() {
    assert_eq!(Topology::parse(TWO_SERVERS, "t").unwrap().replication(), 1);
    let two = TWO_SERVERS.replace("<topologies>", "<topologies replication=\"2\">");
    let t = Topology::parse(&two, "replicated.xml").unwrap();
    assert_eq!(t.replication(), 2);
    t.validate()
        .expect("a replicated topology survives the trip to every process");
    for (value, parts) in [
        (
            "3",
            &[
                "replicated.xml",
                "<topologies>",
                "replication=\"3\"",
                "give 1",
            ][..],
        ),
        ("0", &["replication=\"0\"", "give 1"][..]),
        ("two", &["replication=\"two\" is not a number"][..]),
    ] {
        let xml = TWO_SERVERS.replace(
            "<topologies>",
            &format!("<topologies replication=\"{value}\">"),
        );
        let e = Topology::parse(&xml, "replicated.xml")
            .unwrap_err()
            .to_string();
        assert_contains(&e, parts);
    }
    // Two copies need two servers.
    let one = FIGURE11.replace("<topologies>", "<topologies replication=\"2\">");
    let e = Topology::parse(&one, "one.xml").unwrap_err().to_string();
    assert_contains(&e, &["one.xml", "1 server(s)", "add servers or lower it"]);
    let e = Topology::parse(FIGURE11, "f")
        .unwrap()
        .with_replication(2)
        .unwrap_err()
        .to_string();
    assert_contains(&e, &["replication 2", "give 1 to 1"]);
}
