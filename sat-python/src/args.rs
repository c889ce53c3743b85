//! Int arguments (chunk ids, counts, sizes, barrier, rendezvous and signal
//! ids), checked where they are used so that an error names the argument
//! and says what to give. pyo3's own conversion errors name neither: "can't
//! convert negative int to unsigned", "out of range integral type
//! conversion attempted".

use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;

/// An int argument as the caller gave it. Taking it never fails; the
/// method that reads it ([`Int::u64`], [`Int::u32`], [`Int::usize`]) raises
/// the error, with the argument's name: a negative or too large int is a
/// ValueError, anything else a TypeError.
pub(crate) struct Int(Result<u64, Refused>);

enum Refused {
    /// An int out of 0..2**64, as the caller wrote it.
    Range(String),
    /// Not an int: pyo3's reason ("'str' object cannot be interpreted as
    /// an integer").
    Type(String),
}

impl<'a, 'py> FromPyObject<'a, 'py> for Int {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(Int(match obj.extract::<u64>() {
            Ok(v) => Ok(v),
            Err(e) if e.is_instance_of::<PyOverflowError>(obj.py()) => {
                Err(Refused::Range(shown(&obj)))
            }
            Err(e) => Err(Refused::Type(e.value(obj.py()).to_string())),
        }))
    }
}

impl Int {
    /// A default value of a signature.
    pub(crate) const fn of(value: u64) -> Int {
        Int(Ok(value))
    }

    /// The value, an int from 0 to 2**64 - 1.
    pub(crate) fn u64(&self, what: &str) -> PyResult<u64> {
        self.0
            .as_ref()
            .map(|v| *v)
            .map_err(|r| r.error(what, "64 bits"))
    }

    /// The value, an int from 0 to 2**32 - 1 (the core's barrier,
    /// rendezvous and signal ids, and barrier counts).
    pub(crate) fn u32(&self, what: &str) -> PyResult<u32> {
        let range = format!("32 bits (at most {})", u32::MAX);
        let v = self.0.as_ref().map_err(|r| r.error(what, &range))?;
        u32::try_from(*v).map_err(|_| Refused::Range(v.to_string()).error(what, &range))
    }

    /// The value as a size in memory.
    pub(crate) fn usize(&self, what: &str) -> PyResult<usize> {
        let v = self.u64(what)?;
        usize::try_from(v).map_err(|_| {
            PyValueError::new_err(format!(
                "{what} {v}: larger than this machine's memory; give a smaller size"
            ))
        })
    }
}

impl Refused {
    /// The error of argument `what`, whose ints are those that fit in `range`.
    fn error(&self, what: &str, range: &str) -> PyErr {
        match self {
            Refused::Range(shown) => PyValueError::new_err(format!(
                "{what} {shown}: give an int >= 0 that fits in {range}"
            )),
            Refused::Type(why) => PyTypeError::new_err(format!("{what}: give an int >= 0 ({why})")),
        }
    }
}

/// A value as an error shows it: its repr, cut when long.
pub(crate) fn shown(obj: &Bound<'_, PyAny>) -> String {
    const MAX: usize = 60;
    let repr = obj
        .repr()
        .map(|r| r.to_string())
        .unwrap_or_else(|_| format!("<a {} object>", type_name(obj)));
    match repr.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &repr[..cut]),
        None => repr,
    }
}

/// The name of an object's type, as an error gives it ("str").
pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "object".to_string())
}
