//! The debug stream (section 3.1 of the SAT report, Figures 13 and 14).
//!
//! `SAT_LOG=debug` (or any `tracing` filter, e.g. `SAT_LOG=sat_core::server=debug`)
//! prints one line per event on standard output, each starting with the rank
//! of the process, as the report's examples do:
//!
//! ```text
//! 0 Bootstrap SAT shm relay id 0 np 3 on host node1 with pid 3819
//! 0 Topology (3 topologies) loaded from file figure11.xml
//! 2 Starting code (role 2)
//! ```
//!
//! Under `satrun`, which already prefixes every line with `[rank]`, the rank
//! is not printed twice. Without `SAT_LOG`, only warnings and errors appear.

use std::fmt;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
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
        let filter = std::env::var("SAT_LOG").unwrap_or_default();
        let filter = if filter.trim().is_empty() {
            "warn".to_string()
        } else {
            filter
        };
        let filter = EnvFilter::try_new(&filter).unwrap_or_else(|e| {
            eprintln!("SAT_LOG={filter:?} is not a valid filter ({e}); using 'warn'");
            EnvFilter::new("warn")
        });
        let prefixed = std::env::var_os("SAT_OUTPUT_PREFIXED").is_some();
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stdout)
            .with_ansi(std::io::stdout().is_terminal())
            .event_format(RankFormat {
                print_rank: !prefixed,
            })
            .try_init();
    });
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
