//! Publish-subscribe and signals with Python callbacks.
//!
//! The core runs handlers on the role's thread, one at a time: while the
//! role waits on other processes (rendezvous, barrier, a symbol read that
//! waits for its writer), and in the client loop after the role function
//! returned (sat-core `client/events.rs`). A callback runs there with the
//! GIL taken for it. Its exception is kept and the core is told the handler
//! failed, which ends the wait or the loop at once: the blocking call then
//! raises the callback's own exception, and after the role function, the
//! run fails and `sat.run` raises `RoleError` caused by it.

use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use sat_core::client::{Chain, Event, HandlerResult};

use crate::args::{self, Int};
use crate::chain::PyChain;
use crate::handle::Handle;

/// What a subscription is to, as the caller gave it: a chain (every chunk
/// of it) or a chunk id. Taking it never fails: [`Target::subject`] checks
/// it, so that its error names the argument and says what to give (pyo3's
/// own, for an enum, lists the variants' conversion errors).
#[derive(FromPyObject)]
pub(crate) struct Target<'py>(Bound<'py, PyAny>);

/// A target, checked: the chain in the S-DSM (of a protected chain, its
/// sealed chunks), or the chunk.
pub(crate) enum Subject {
    Chain(Chain),
    Chunk(u64),
}

impl Target<'_> {
    pub(crate) fn subject(&self) -> PyResult<Subject> {
        const GIVE: &str = "give a Chain or a chunk id";
        if let Ok(c) = self.0.cast::<PyChain>() {
            let c = c.get();
            c.h.check_process()?;
            return Ok(Subject::Chain(c.chain.clone()));
        }
        let shown = args::shown(&self.0);
        match self.0.extract::<Int>()?.u64("target") {
            Ok(id) => Ok(Subject::Chunk(id)),
            Err(e) if e.is_instance_of::<PyValueError>(self.0.py()) => Err(PyValueError::new_err(
                format!("target {shown}: {GIVE} (an int >= 0 that fits in 64 bits)"),
            )),
            Err(_) => Err(PyTypeError::new_err(format!(
                "target {shown}: {GIVE} (int), not a {}",
                args::type_name(&self.0)
            ))),
        }
    }
}

/// What a chunk subscription's callback is given.
#[pyclass(name = "ChunkEvent", module = "sat", frozen)]
pub(crate) struct ChunkEvent {
    /// The chunk released: for a chain's subscription, the chain's chunk
    /// whose release this tells of (the latest, when notifications merged).
    #[pyo3(get)]
    chunk: u64,
    /// The newest version when the notification left the home (version n
    /// is the n-th write release; pending notifications merge into the
    /// newest).
    #[pyo3(get)]
    version: u64,
    /// That chunk's bytes at that version when subscribed `with_data` (for a
    /// chain, the bytes of that chunk only), else None.
    #[pyo3(get)]
    data: Option<Py<PyBytes>>,
}

#[pymethods]
impl ChunkEvent {
    fn __repr__(&self, py: Python<'_>) -> String {
        let data = match &self.data {
            Some(d) => format!("{} bytes", d.bind(py).as_bytes().len()),
            None => "None".to_string(),
        };
        format!(
            "<sat.ChunkEvent chunk {} version {}, data {data}>",
            self.chunk, self.version
        )
    }
}

/// Runs a Python callback for the core, with the GIL, the client open.
fn run_callback(
    h: &Handle,
    what: &str,
    f: impl FnOnce(Python<'_>) -> PyResult<()>,
) -> HandlerResult {
    // After the role function the client is closed: a callback may use it
    // (and the chains) while it runs, as C handlers may.
    let after_role = h.reopen();
    let outcome = Python::attach(|py| {
        f(py).map_err(|e| {
            let note = if after_role {
                format!("raised by {what}, which SAT ran after the role function had returned")
            } else {
                format!(
                    "raised by {what}, which SAT ran while this process waited in a blocking \
                     call; that call was abandoned"
                )
            };
            // Best effort: the exception stays what it is without its note.
            let _ = e.value(py).call_method1("add_note", (note,));
            if after_role {
                // No Python frame is there to take the exception: print it
                // now, as a failing role function is.
                e.display(py);
            }
            let msg = e.to_string();
            h.keep_callback_error(e);
            msg
        })
    });
    if after_role {
        h.close();
    }
    outcome.map_err(Into::into)
}

pub(crate) fn subscribe(
    py: Python<'_>,
    h: &Arc<Handle>,
    subject: Subject,
    callback: Py<PyAny>,
    with_data: bool,
) -> PyResult<()> {
    let handle = h.clone();
    // The name a callback's exception note gives it: the core's name of the
    // subscription, as in the handler's error.
    let what = match &subject {
        Subject::Chain(c) => {
            let n = c.len();
            let unit = if n == 1 { "chunk" } else { "chunks" };
            format!(
                "the callback of the chain of chunk {} ({n} {unit})",
                c.first()
            )
        }
        Subject::Chunk(chunk) => format!("the callback of chunk {chunk}"),
    };
    let handler = move |_: &sat_core::client::Client, event: &Event| {
        let Event::Chunk {
            chunk,
            version,
            data,
        } = event
        else {
            return Ok(());
        };
        run_callback(&handle, &what, |py| {
            let event = ChunkEvent {
                chunk: *chunk,
                version: *version,
                data: data.as_deref().map(|d| PyBytes::new(py, d).unbind()),
            };
            callback.call1(py, (event,)).map(drop)
        })
    };
    h.blocking(py, |c| match &subject {
        Subject::Chain(chain) => c.subscribe_chain(chain, with_data, handler),
        Subject::Chunk(chunk) => c.subscribe(*chunk, with_data, handler),
    })
}

pub(crate) fn unsubscribe(py: Python<'_>, h: &Arc<Handle>, subject: Subject) -> PyResult<()> {
    h.blocking(py, |c| match &subject {
        Subject::Chain(chain) => c.unsubscribe_chain(chain),
        Subject::Chunk(chunk) => c.unsubscribe(*chunk),
    })
}

pub(crate) fn subscribe_signal(
    py: Python<'_>,
    h: &Arc<Handle>,
    id: u32,
    callback: Py<PyAny>,
) -> PyResult<()> {
    let handle = h.clone();
    let handler = move |_: &sat_core::client::Client, _: &Event| {
        run_callback(&handle, &format!("the callback of signal {id}"), |py| {
            callback.call1(py, (id,)).map(drop)
        })
    };
    h.blocking(py, |c| c.subscribe_signal(id, handler))
}

pub(crate) fn add(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<ChunkEvent>()
}
