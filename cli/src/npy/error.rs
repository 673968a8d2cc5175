//! What can go wrong reading or writing a `.npy` file, and how it reads in a message.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use scatterjit::ir::DType;

use crate::atomic::system_message;

/// Which part of a `.npy` file ended too early.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NpyPart {
    /// The magic string, version and header length.
    Preamble,
    /// The header text.
    Header,
    /// The array's bytes.
    Payload,
}

impl fmt::Display for NpyPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NpyPart::Preamble => "preamble",
            NpyPart::Header => "header",
            NpyPart::Payload => "payload",
        })
    }
}

/// What is wrong with a `.npy` file or with a request to write one.
#[derive(Debug)]
pub enum NpyErrorKind {
    /// The operating system refused to open, read, write, sync or rename a file.
    Io {
        /// What was being done (`"open"`, `"read"`, `"write"`, ...).
        action: &'static str,
        /// The system's error.
        error: io::Error,
    },
    /// The file does not start with `\x93NUMPY`.
    BadMagic {
        /// The first bytes of the file (at most six).
        found: Vec<u8>,
    },
    /// A format version other than 1.0, 2.0 or 3.0.
    UnsupportedVersion {
        /// Major version byte.
        major: u8,
        /// Minor version byte.
        minor: u8,
    },
    /// The file ends before the part it announces does.
    Truncated {
        /// The part that is cut short.
        part: NpyPart,
        /// Bytes that part needs.
        expected: u64,
        /// Bytes left in the file.
        available: u64,
    },
    /// The header text is not the Python dict literal numpy writes.
    Header {
        /// What is wrong with it.
        reason: String,
    },
    /// A multi-byte dtype stored big-endian.
    BigEndian {
        /// The descr.
        descr: String,
    },
    /// A byte-string dtype (`|S…`); text must be saved as unicode (`<U…`).
    StringDType {
        /// The descr.
        descr: String,
    },
    /// Any other dtype outside the table (datetimes, structured dtypes, other widths).
    UnsupportedDType {
        /// The descr (for structured dtypes, its Python source text).
        descr: String,
    },
    /// The array is stored in Fortran (column-major) order.
    FortranOrder,
    /// The shape's element or byte count does not fit in memory (or in `usize`).
    ShapeOverflow {
        /// The shape as written in the header.
        shape: Vec<u64>,
        /// The descr.
        descr: String,
    },
    /// The file has more bytes after the payload than the shape accounts for.
    TrailingBytes {
        /// Payload bytes the shape needs.
        expected: u64,
        /// Bytes the file has after the header.
        actual: u64,
    },
    /// A bool element whose byte is neither 0 nor 1.
    InvalidBool {
        /// Its flat (row-major) position.
        offset: usize,
        /// The byte.
        byte: u8,
    },
    /// A unicode element holding a code unit that is not a Unicode scalar value (a
    /// surrogate, or above U+10FFFF).
    InvalidCodePoint {
        /// The element's flat (row-major) position.
        offset: usize,
        /// The character's position in the element.
        index: usize,
        /// The code unit.
        value: u32,
    },
    /// The payload's buffer could not be allocated.
    OutOfMemory {
        /// Bytes requested.
        bytes: usize,
    },
    /// Writing: the descr does not describe the tensor's dtype.
    DescrMismatch {
        /// The descr given.
        descr: String,
        /// The tensor's dtype.
        dtype: DType,
    },
    /// Writing: the header would be longer than format 2.0 allows (4 GiB).
    HeaderTooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The op IR refused the tensor (not expected once the checks above pass).
    Tensor(scatterjit::ir::Error),
}

impl fmt::Display for NpyErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NpyErrorKind::Io { action, error } => {
                write!(f, "cannot {action}: {}", system_message(error))
            }
            NpyErrorKind::BadMagic { found } => write!(
                f,
                "not an .npy file (it starts with \"{}\", not \"\\x93NUMPY\")",
                found.escape_ascii()
            ),
            NpyErrorKind::UnsupportedVersion { major, minor } => write!(
                f,
                "unsupported .npy format version {major}.{minor} (expected 1.0, 2.0 or 3.0)"
            ),
            NpyErrorKind::Truncated {
                part,
                expected,
                available,
            } => write!(
                f,
                "truncated {part}: it needs {expected} bytes but the file has only {available} left"
            ),
            NpyErrorKind::Header { reason } => write!(f, "malformed header: {reason}"),
            NpyErrorKind::BigEndian { descr } => write!(
                f,
                "big-endian dtype '{}' is not supported (save the array as little-endian)",
                Printable(descr)
            ),
            NpyErrorKind::StringDType { descr } => {
                write!(
                    f,
                    "byte-string dtype '{}' is not supported (save text as a unicode array, dtype '<U')",
                    Printable(descr)
                )
            }
            NpyErrorKind::UnsupportedDType { descr } => {
                write!(
                    f,
                    "unsupported dtype '{}'{}",
                    Printable(descr),
                    dtype_hint(descr)
                )
            }
            NpyErrorKind::FortranOrder => f.write_str(
                "fortran-order arrays are not supported (save a C-order copy, e.g. with np.ascontiguousarray)",
            ),
            NpyErrorKind::ShapeOverflow { shape, descr } => write!(
                f,
                "shape {} of dtype '{}' has more bytes than fit in memory",
                ShapeText(shape),
                Printable(descr)
            ),
            NpyErrorKind::TrailingBytes { expected, actual } => write!(
                f,
                "{} unexpected bytes after the payload (the shape needs {expected} bytes, the file has {actual})",
                actual.saturating_sub(*expected)
            ),
            NpyErrorKind::InvalidBool { offset, byte } => {
                write!(f, "bool element {offset} has byte {byte}, expected 0 or 1")
            }
            NpyErrorKind::InvalidCodePoint {
                offset,
                index,
                value,
            } => write!(
                f,
                "string element {offset} has 0x{value:X} at character {index}, which is not a unicode scalar value"
            ),
            NpyErrorKind::OutOfMemory { bytes } => {
                write!(f, "cannot allocate {bytes} bytes for the payload")
            }
            NpyErrorKind::DescrMismatch { descr, dtype } => write!(
                f,
                "descr '{}' does not describe dtype {dtype} (whose descr is '{}')",
                Printable(descr),
                dtype.npy_descr()
            ),
            NpyErrorKind::HeaderTooLong { len } => write!(
                f,
                "header of {len} bytes is too long for the .npy format"
            ),
            NpyErrorKind::Tensor(e) => e.fmt(f),
        }
    }
}

/// An error reading or writing a `.npy` file: what went wrong, and in which file.
///
/// The message is one line, lowercase, and starts with the file's path when there is one
/// (`data.npy: truncated payload: ...`). Match on [`NpyError::kind`] to tell cases apart.
#[derive(Debug)]
pub struct NpyError {
    path: Option<PathBuf>,
    kind: NpyErrorKind,
}

impl NpyError {
    /// An error not tied to a file (in-memory reads and writes).
    pub fn new(kind: NpyErrorKind) -> Self {
        NpyError { path: None, kind }
    }

    /// An error about the file at `path`.
    pub fn at(path: impl Into<PathBuf>, kind: NpyErrorKind) -> Self {
        NpyError {
            path: Some(path.into()),
            kind,
        }
    }

    /// What went wrong.
    pub fn kind(&self) -> &NpyErrorKind {
        &self.kind
    }

    /// The file concerned, if any.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Gives up the error, keeping what went wrong.
    pub fn into_kind(self) -> NpyErrorKind {
        self.kind
    }
}

impl From<NpyErrorKind> for NpyError {
    fn from(kind: NpyErrorKind) -> Self {
        NpyError::new(kind)
    }
}

impl fmt::Display for NpyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            Some(path) => write!(f, "{}: {}", path.display(), self.kind),
            None => self.kind.fmt(f),
        }
    }
}

/// The message already includes the underlying system error's text (see
/// [`NpyErrorKind::Io`]), so no separate `source` is reported; match on [`NpyError::kind`]
/// to reach it.
impl std::error::Error for NpyError {}

pub(super) type KindResult<T> = Result<T, NpyErrorKind>;

pub(super) fn io_error(action: &'static str) -> impl FnOnce(io::Error) -> NpyErrorKind {
    move |error| NpyErrorKind::Io { action, error }
}

/// npyz's reading of a numpy type string, with `=` (native, little-endian here) accepted.
pub(super) fn parse_type_str(descr: &str) -> Option<npyz::TypeStr> {
    match descr.strip_prefix('=') {
        Some(rest) => format!("<{rest}").parse().ok(),
        None => descr.parse().ok(),
    }
}

/// A word on what an unsupported descr is, for messages.
fn dtype_hint(descr: &str) -> &'static str {
    if descr.starts_with('[') {
        return " (structured dtypes are not supported)";
    }
    if descr.ends_with('O') && descr.len() == 2 {
        return " (python object arrays are not supported)";
    }
    match parse_type_str(descr).map(|ts| ts.type_char()) {
        Some(npyz::TypeChar::DateTime) => " (datetime64 is not supported)",
        Some(npyz::TypeChar::TimeDelta) => " (timedelta64 is not supported)",
        Some(npyz::TypeChar::RawData) => " (raw bytes; only '<V2', read as bfloat16, is supported)",
        Some(_) => " (no tensor dtype has this width)",
        None => " (not a numpy dtype)",
    }
}

/// Text with control characters escaped, so that a message stays on one line.
pub(super) struct Printable<'a>(pub(super) &'a str);

impl fmt::Display for Printable<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

/// A shape the way numpy prints it: `()`, `(3,)`, `(2, 3)`.
pub(super) struct ShapeText<'a, T>(pub(super) &'a [T]);

impl<T: fmt::Display> fmt::Display for ShapeText<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("(")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        if self.0.len() == 1 {
            f.write_str(",")?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use crate::npy::test_support::*;

    #[test]
    fn messages_are_one_lowercase_line() {
        let samples = [
            kind_of(b""),
            kind_of(&image((1, 0), &dict("<f4", "True", "(1,)"), &[0; 4])),
            kind_of(&image((1, 0), "{\n'descr'\n}", &[])),
        ];
        for k in samples {
            let msg = k.to_string();
            assert!(!msg.contains('\n'), "{msg:?}");
            assert!(msg.chars().next().unwrap().is_lowercase(), "{msg}");
        }
    }
}
