//! The debug stream (section 3.1 of the SAT report, Figures 13 and 14).
//!
//! `SAT_LOG=debug` (or any `tracing` filter, e.g. `SAT_LOG=sat_core::server=debug`)
//! prints one line per event, each starting with the rank of the process, as
//! the report's examples do:
//!
//! ```text
//! 0 Bootstrap SAT shm relay id 0 np 3 on host node1 with pid 3819
//! 0 Topology (3 topologies) loaded from file figure11.xml
//! 2 Starting code (role 2)
//! ```
//!
//! Under `satrun`, which already prefixes every line with `[rank]`, the rank
//! is not printed twice. Without `SAT_LOG`, only warnings and errors appear;
//! a filter that names parts of SAT only (`sat_capi=debug`) keeps the
//! warnings and errors of the others.
//!
//! The lines go to standard error, never standard output: a library must not
//! mix its diagnostics into an application's output (the report prints them
//! on the console; satrun shows both streams). An application can take them
//! instead ([`set_log_sink`]; `sat_set_log_handler` in C).

use std::fmt;
use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

const RANK_UNKNOWN: u32 = u32::MAX;
static RANK: AtomicU32 = AtomicU32::new(RANK_UNKNOWN);
static INIT: OnceLock<()> = OnceLock::new();

/// Records this process's rank for the prefix of every following line.
pub fn set_rank(rank: u32) {
    RANK.store(rank, Ordering::Relaxed);
}

thread_local! {
    /// A rank for this thread's lines only: the simulator runs many
    /// simulated processes in one.
    static THREAD_RANK: std::cell::Cell<u32> = const { std::cell::Cell::new(RANK_UNKNOWN) };
}

/// The rank this thread's lines carry, over the process's (None: the
/// process's again).
pub fn set_thread_rank(rank: Option<u32>) {
    THREAD_RANK.with(|r| r.set(rank.unwrap_or(RANK_UNKNOWN)));
}

/// Installs the debug stream once per process (later calls do nothing, and an
/// application that installed its own `tracing` subscriber keeps it).
pub fn init() {
    INIT.get_or_init(|| {
        let filter = with_default_level(&std::env::var("SAT_LOG").unwrap_or_default());
        let filter = EnvFilter::try_new(&filter).unwrap_or_else(|e| {
            eprintln!("SAT_LOG={filter:?} is not a valid filter ({e}); using 'warn'");
            EnvFilter::new("warn")
        });
        if let Some(stray) = stray_target(&std::env::var("SAT_LOG").unwrap_or_default()) {
            eprintln!(
                "SAT_LOG: {stray:?} is neither a level (error, warn, info, debug, trace) nor a \
                 part of SAT (sat_core, sat_capi, sat_python, e.g. sat_core::server=debug): \
                 it turns on nothing"
            );
        }
        let prefixed = std::env::var_os("SAT_OUTPUT_PREFIXED").is_some();
        // No colour codes: the lines may go to a sink, a file or a pipe.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(LineWriters)
            .with_ansi(false)
            .event_format(RankFormat {
                print_rank: !prefixed,
            })
            .try_init();
    });
}

/// The levels a `SAT_LOG` directive may give alone.
const LEVELS: [&str; 6] = ["error", "warn", "info", "debug", "trace", "off"];

/// The filter a `SAT_LOG` value means: one that only names parts of SAT
/// (`sat_capi=debug`) turns those parts up and leaves every other part at
/// warnings and errors, as without `SAT_LOG` (a `tracing` filter alone would
/// turn everything else off, warnings and errors included). A level given
/// alone (`debug`, `error`, `off`) sets the rest.
fn with_default_level(filter: &str) -> String {
    let filter = filter.trim();
    let sets_the_rest = filter
        .split(',')
        .map(str::trim)
        .any(|d| LEVELS.iter().any(|l| d.eq_ignore_ascii_case(l)));
    match (filter.is_empty(), sets_the_rest) {
        (true, _) => "warn".to_string(),
        (false, true) => filter.to_string(),
        (false, false) => format!("warn,{filter}"),
    }
}

/// The first directive of a `SAT_LOG` filter that names something other
/// than a level or a part of SAT (`garbage`, `sat-core`): a valid filter
/// that can turn on nothing, so a typo would go unnoticed.
fn stray_target(filter: &str) -> Option<&str> {
    filter.split(',').map(str::trim).find(|d| {
        let target = d.split(['=', '[']).next().unwrap_or("").trim();
        !target.is_empty()
            && !LEVELS.iter().any(|l| target.eq_ignore_ascii_case(l))
            && !target.starts_with("sat_")
    })
}

/// Where an application wants the debug stream's lines: called with each
/// line's level and text (no newline), from whichever thread logs it.
pub type LogSink = Arc<dyn Fn(Level, &str) + Send + Sync>;

static SINK: Mutex<Option<LogSink>> = Mutex::new(None);

/// Sends every following line to `sink` instead of standard error (None:
/// standard error again), and installs the debug stream if it is not yet.
pub fn set_log_sink(sink: Option<LogSink>) {
    *SINK.lock().unwrap_or_else(PoisonError::into_inner) = sink;
    init();
}

/// The writers of the debug stream: one per line, for its level.
struct LineWriters;

impl<'a> MakeWriter<'a> for LineWriters {
    type Writer = LineWriter;

    fn make_writer(&'a self) -> LineWriter {
        LineWriter::new(Level::INFO)
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> LineWriter {
        LineWriter::new(*meta.level())
    }
}

/// Gathers one line and hands it on when dropped: to the sink, taken out of
/// its lock first (a sink that logs must not deadlock), or to standard error
/// in one write (lines of several threads do not interleave).
struct LineWriter {
    level: Level,
    line: Vec<u8>,
}

impl LineWriter {
    fn new(level: Level) -> LineWriter {
        LineWriter {
            level,
            line: Vec::with_capacity(128),
        }
    }
}

impl Write for LineWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.line.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        if self.line.is_empty() {
            return;
        }
        let sink = SINK.lock().unwrap_or_else(PoisonError::into_inner).clone();
        match sink {
            Some(sink) => {
                let text = String::from_utf8_lossy(&self.line);
                sink(self.level, text.trim_end_matches('\n'));
            }
            // A closed standard error loses the line, nothing else.
            None => {
                let _ = std::io::stderr().lock().write_all(&self.line);
            }
        }
    }
}

/// `<rank> <message> <fields>`; warnings and errors also name their level.
struct RankFormat {
    print_rank: bool,
}

impl<S, N> FormatEvent<S, N> for RankFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        if self.print_rank {
            let mine = THREAD_RANK.with(std::cell::Cell::get);
            let rank = if mine == RANK_UNKNOWN {
                RANK.load(Ordering::Relaxed)
            } else {
                mine
            };
            match rank {
                RANK_UNKNOWN => write!(writer, "? ")?,
                rank => write!(writer, "{rank} ")?,
            }
        }
        let level = *event.metadata().level();
        if level <= tracing::Level::WARN {
            write!(writer, "{level}: ")?;
        }
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

#[cfg(test)]
mod tests {
    use super::{stray_target, with_default_level};

    #[test]
    fn a_filter_of_parts_keeps_the_others_warnings() {
        assert_eq!(with_default_level(""), "warn");
        assert_eq!(with_default_level(" debug "), "debug");
        assert_eq!(with_default_level("OFF"), "OFF");
        assert_eq!(
            with_default_level("error,sat_core=debug"),
            "error,sat_core=debug"
        );
        assert_eq!(with_default_level("sat_capi=debug"), "warn,sat_capi=debug");
        assert_eq!(
            with_default_level("sat_core::server=trace, sat_capi=info"),
            "warn,sat_core::server=trace, sat_capi=info"
        );
    }

    #[test]
    fn a_filter_that_can_turn_on_nothing_is_named() {
        for good in [
            "",
            "debug",
            "WARN",
            "sat_core=debug",
            "warn,sat_core::server=trace",
            "sat_capi[span]=info",
        ] {
            assert_eq!(stray_target(good), None, "{good:?}");
        }
        assert_eq!(stray_target("garbage!!"), Some("garbage!!"));
        assert_eq!(
            stray_target("debug, sat-core=trace"),
            Some("sat-core=trace")
        );
        assert_eq!(stray_target("verbose"), Some("verbose"));
    }
}
