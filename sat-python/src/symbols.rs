//! `client.symbols`: the table of symbols, read and written by name, whose
//! values are bytes or numpy arrays. The reads and writes are the core's
//! `read_symbol` and `write_symbol`; how a value is stored (bytes as they
//! are, arrays in the .npy format) is `sat/_symbols.py`'s.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::abe;
use crate::client::duration;
use crate::errors::{usage, AccessDenied, IntegrityError, TimeoutError};
use crate::handle::Handle;

/// A symbol's name as the caller gave it: a str, or a TypeError that says
/// so (pyo3's own names neither the argument nor what to give).
pub(crate) struct Name(String);

impl<'a, 'py> FromPyObject<'a, 'py> for Name {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        obj.extract::<String>().map(Name).map_err(|_| {
            let shown = obj
                .repr()
                .map(|r| r.to_string())
                .unwrap_or_else(|_| "?".into());
            PyTypeError::new_err(format!(
                "symbol name {shown}: give a str, such as 'frame-size'"
            ))
        })
    }
}

/// The table of symbols of a run, read and written by name, as a dict is:
/// `symbols[name] = value`, `symbols[name]`, `name in symbols`,
/// `symbols.get(name)`. It is not a Mapping: the S-DSM keeps no list of the
/// names written, so the symbols cannot be listed (iterating raises
/// `TypeError`; there is no `len`, `keys`, `values` or `items`). There is
/// no delete: `del symbols[name]` raises `UsageError`, as the S-DSM has no
/// FREE (write the name again to replace its value).
#[pyclass(name = "Symbols", module = "sat", frozen)]
pub(crate) struct PySymbols {
    h: Arc<Handle>,
    /// Seconds `symbols[name]` waits for a writer.
    timeout: Mutex<f64>,
}

impl PySymbols {
    pub(crate) fn new(h: Arc<Handle>) -> PySymbols {
        PySymbols {
            h,
            timeout: Mutex::new(10.0),
        }
    }

    fn seconds(&self) -> f64 {
        *self.timeout.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The value as stored, opened when the encryption layer sealed it.
    fn raw(&self, py: Python<'_>, name: &str, timeout: Duration) -> PyResult<Vec<u8>> {
        self.h.blocking(py, |c| {
            let raw = c.read_symbol(name, timeout)?;
            abe::open_symbol(c, name, raw)
        })
    }

    fn decode<'py>(&self, py: Python<'py>, name: &str, data: &[u8]) -> PyResult<Bound<'py, PyAny>> {
        py.import("sat._symbols")?
            .call_method1("decode", (name, PyBytes::new(py, data)))
    }
}

#[pymethods]
impl PySymbols {
    /// Seconds `symbols[name]` waits for some process to write the name
    /// (10 by default).
    #[getter]
    fn timeout(&self) -> PyResult<f64> {
        self.h.check_process()?;
        Ok(self.seconds())
    }

    #[setter]
    fn set_timeout(&self, seconds: f64) -> PyResult<()> {
        self.h.check_process()?;
        duration(seconds)?;
        *self.timeout.lock().unwrap_or_else(|p| p.into_inner()) = seconds;
        Ok(())
    }

    /// The value of `name`: bytes, or the numpy array stored. Waits at most
    /// `timeout` seconds for a writer, then raises sat.TimeoutError.
    fn __getitem__<'py>(&self, py: Python<'py>, name: Name) -> PyResult<Bound<'py, PyAny>> {
        let name = name.0.as_str();
        let timeout = duration(self.seconds())?;
        let data = self.raw(py, name, timeout)?;
        self.decode(py, name, &data)
    }

    /// Stores `value` (bytes-like, or a numpy array kept with its dtype and
    /// shape) under `name`, replacing any earlier value.
    fn __setitem__(&self, py: Python<'_>, name: Name, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let name = name.0.as_str();
        let encoded = py
            .import("sat._symbols")?
            .call_method1("encode", (name, value))?;
        let data = encoded.cast::<PyBytes>()?.as_bytes();
        self.h.blocking(py, |c| c.write_symbol(name, data))
    }

    /// `symbols[name] = value`, sealed by the encryption layer: readable by
    /// keys that satisfy `read_policy`, written by certificates that satisfy
    /// `write_policy`. Reading it back is the usual `symbols[name]`.
    #[pyo3(signature = (name, value, *, read_policy, write_policy))]
    fn protect(
        &self,
        py: Python<'_>,
        name: Name,
        value: &Bound<'_, PyAny>,
        read_policy: &str,
        write_policy: &str,
    ) -> PyResult<()> {
        let name = name.0.as_str();
        let encoded = py
            .import("sat._symbols")?
            .call_method1("encode", (name, value))?;
        let data = encoded.cast::<PyBytes>()?.as_bytes();
        self.h.blocking(py, |c| {
            abe::write_symbol(c, name, data, read_policy, write_policy)
        })
    }

    /// Refused: a symbol cannot be deleted, as the S-DSM has no FREE (the
    /// table keeps every name written). Raises `UsageError`; write the name
    /// again to replace its value.
    fn __delitem__(&self, name: Name) -> PyResult<()> {
        let name = name.0.as_str();
        self.h.check_process()?;
        Err(usage(format!(
            "del symbols[{name:?}]: a symbol cannot be deleted (the S-DSM has no FREE); \
             write the name again to replace its value"
        )))
    }

    /// Whether some process has written `name`, without waiting for one.
    /// It reads the name's bucket (a round trip to its home when this
    /// process's copy is not valid) and, when there, the value. A protected
    /// value this client may not read, or one that fails its checks, is
    /// there all the same: True, where reading it raises.
    fn __contains__(&self, py: Python<'_>, name: Name) -> PyResult<bool> {
        let name = name.0.as_str();
        match self.raw(py, name, Duration::ZERO) {
            Ok(_) => Ok(true),
            Err(e) if e.is_instance_of::<TimeoutError>(py) => Ok(false),
            Err(e)
                if e.is_instance_of::<AccessDenied>(py)
                    || e.is_instance_of::<IntegrityError>(py) =>
            {
                Ok(true)
            }
            Err(e) => Err(e),
        }
    }

    /// The value of `name`, or `default` when no process has written it
    /// within `timeout` seconds (0: do not wait).
    #[pyo3(signature = (name, default = None, timeout = 0.0))]
    fn get<'py>(
        &self,
        py: Python<'py>,
        name: Name,
        default: Option<Bound<'py, PyAny>>,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let name = name.0.as_str();
        match self.raw(py, name, duration(timeout)?) {
            Ok(data) => self.decode(py, name, &data),
            Err(e) if e.is_instance_of::<TimeoutError>(py) => {
                Ok(default.unwrap_or_else(|| py.None().into_bound(py)))
            }
            Err(e) => Err(e),
        }
    }

    /// Refused: the S-DSM keeps no list of the names written (a symbol
    /// lives in a bucket its name hashes to), so the symbols cannot be
    /// listed. Without this, Python would iterate by `symbols[0]`,
    /// `symbols[1]`... and fail on the int.
    fn __iter__(&self) -> PyResult<Py<PyAny>> {
        self.h.check_process()?;
        Err(PyTypeError::new_err(
            "the symbols cannot be listed: the S-DSM keeps no list of the names written; read a \
             symbol by its name: symbols[name], symbols.get(name), name in symbols",
        ))
    }

    fn __repr__(&self) -> String {
        format!("<sat.Symbols, timeout {} s>", self.seconds())
    }
}
