//! Reading and writing NumPy `.npy` files as [`Tensor`]s.
//!
//! Reading accepts format versions 1.0, 2.0 and 3.0, little-endian C-order arrays of the
//! dtypes in [`DType`]'s table (`<V2` reads as bfloat16, which is how numpy saves an
//! `ml_dtypes.bfloat16` array). The payload is read in one piece into a buffer of exactly the
//! size the header announces, which becomes the tensor's storage: no per-element conversion
//! and no copy. Unicode arrays (`<U{n}`) are the exception: they become string tensors.
//!
//! Decisions a user should know:
//! - The header is parsed here rather than by `npyz::NpyHeader`: npyz allocates whatever
//!   header length the file claims, multiplies the shape without overflow checks (a hostile
//!   header panics in debug builds) and rejects the `=` byte-order spelling. The parser below
//!   accepts the Python literal subset numpy writes (dict, strings, integers with an optional
//!   Python 2 `L` suffix, tuples, lists, `True`/`False`/`None`), nested at most
//!   [`MAX_HEADER_DEPTH`] deep, and headers of at most [`MAX_HEADER_LEN`] bytes.
//! - The header must have exactly the keys `descr`, `fortran_order` and `shape` (as numpy
//!   requires); a key given twice is refused rather than letting the last one win.
//! - Byte order: `<`, `=` (and `|` for one-byte types) as [`DType::from_npy_descr`] accepts;
//!   one-byte types written with `>` (`>u1`) are accepted too, since numpy reads them as the
//!   same type. Big-endian multi-byte types are refused, as are byte strings (`|S…`),
//!   structured dtypes and Fortran-order arrays.
//! - Unicode arrays (`<U{n}`, `=U{n}`, and big-endian `>U{n}`) are read as string tensors:
//!   each element is `n` UTF-32 code units, and trailing NULs are dropped as numpy does (so
//!   a string that ends in NUL characters does not survive a round trip). A unit that is
//!   not a Unicode scalar value is an error naming the element. numpy never writes `U0`,
//!   which is refused. Writing a string tensor takes any unicode descr for its byte order
//!   and writes the width of the longest string in code points (at least 1), as numpy does.
//! - The byte size of the shape is checked against the bytes actually left in the file
//!   before anything is allocated, and bytes after the payload are an error.
//! - [`NpyArray::descr`] keeps the descr string exactly as read, so a result can be written
//!   with its input's spelling (a `<V2` bfloat16 input gives a `<V2` output).
//! - [`write()`] is atomic: it writes a temporary file in the target's directory, syncs it and
//!   renames it over the target. On error the target is untouched and the temporary file is
//!   removed. The new file gets default permissions, and a symbolic link at the target path
//!   is replaced by a regular file (the link's target is left alone).

use std::borrow::Cow;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Cursor, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use scatterjit::ir::{checked_nbytes, DType, Tensor};

/// The six bytes every `.npy` file starts with.
const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// Headers are padded so the payload starts at a multiple of this (as numpy does).
const ALIGN: usize = 64;

/// The longest header read, in bytes; a real header is a few hundred bytes at most.
pub const MAX_HEADER_LEN: usize = 1 << 20;

/// The deepest nesting of brackets accepted in a header.
pub const MAX_HEADER_DEPTH: usize = 16;

/// A tensor read from a `.npy` file, with the dtype descr exactly as the file spelled it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NpyArray {
    /// The array's elements, dtype and shape.
    pub tensor: Tensor,
    /// The descr string from the header (`<f4`, `|b1`, `<V2`, `=i8`, ...).
    pub descr: String,
}

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
                write!(f, "cannot {action}: {}", lowercase_first(&error.to_string()))
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

type KindResult<T> = Result<T, NpyErrorKind>;

fn io_error(action: &'static str) -> impl FnOnce(io::Error) -> NpyErrorKind {
    move |error| NpyErrorKind::Io { action, error }
}

// ---------------------------------------------------------------------------------------------
// Reading

/// Reads the `.npy` file at `path`. Errors name the file.
///
/// A path that is not a regular file (a pipe such as `<(python make.py)`, a device) cannot
/// tell its length in advance: it is read to its end first, then parsed, which costs one
/// copy of the payload.
///
/// ```no_run
/// let array = scatterjit_cli::npy::read("data.npy")?;
/// println!("{} {:?} ({})", array.tensor.dtype(), array.tensor.shape(), array.descr);
/// # Ok::<(), scatterjit_cli::npy::NpyError>(())
/// ```
pub fn read(path: impl AsRef<Path>) -> Result<NpyArray, NpyError> {
    let path = path.as_ref();
    let at = |kind| NpyError::at(path, kind);
    let mut file = File::open(path).map_err(|e| at(io_error("open")(e)))?;
    let regular = file
        .metadata()
        .map_err(|e| at(io_error("read")(e)))?
        .is_file();
    if regular {
        return read_stream(file).map_err(at);
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| at(io_error("read")(e)))?;
    read_stream(Cursor::new(&bytes[..])).map_err(at)
}

/// Reads one `.npy` array from `reader`, starting at its current position. The reader must
/// end where the array does (trailing bytes are an error); `Seek` is used to learn how many
/// bytes are left before allocating anything.
pub fn read_from<R: Read + Seek>(reader: R) -> Result<NpyArray, NpyError> {
    read_stream(reader).map_err(NpyError::new)
}

/// Reads a `.npy` array from an in-memory file image (copies the payload into the tensor).
///
/// ```
/// use scatterjit::Tensor;
/// use scatterjit_cli::npy;
/// let t = Tensor::from_slice(&[2], &[1.5f32, -2.0]).unwrap();
/// let bytes = npy::to_bytes(&t, "<f4").unwrap();
/// assert_eq!(npy::from_bytes(&bytes).unwrap().tensor, t);
/// ```
pub fn from_bytes(bytes: &[u8]) -> Result<NpyArray, NpyError> {
    read_from(Cursor::new(bytes))
}

fn read_stream<R: Read + Seek>(mut r: R) -> KindResult<NpyArray> {
    let start = r.stream_position().map_err(io_error("read"))?;
    let end = r.seek(SeekFrom::End(0)).map_err(io_error("read"))?;
    r.seek(SeekFrom::Start(start)).map_err(io_error("read"))?;
    let mut left = end.saturating_sub(start);

    // Magic and version.
    let mut pre = [0u8; 8];
    let got = read_up_to(&mut r, &mut pre)?;
    if got < MAGIC.len() || pre[..MAGIC.len()] != MAGIC[..] {
        return Err(NpyErrorKind::BadMagic {
            found: pre[..got.min(MAGIC.len())].to_vec(),
        });
    }
    let len_size: usize = match (pre[6], pre[7]) {
        _ if got < pre.len() => 0,
        (1, 0) => 2,
        (2, 0) | (3, 0) => 4,
        (major, minor) => return Err(NpyErrorKind::UnsupportedVersion { major, minor }),
    };
    let utf8 = pre[6] == 3;
    let preamble_len = (pre.len() + len_size.max(2)) as u64;
    if got < pre.len() || left < preamble_len {
        return Err(NpyErrorKind::Truncated {
            part: NpyPart::Preamble,
            expected: preamble_len,
            available: left,
        });
    }
    let mut len_bytes = [0u8; 4];
    r.read_exact(&mut len_bytes[..len_size])
        .map_err(truncated_or_io(NpyPart::Preamble, preamble_len, left))?;
    left -= preamble_len;

    // Header.
    let header_len = u32::from_le_bytes(len_bytes) as usize;
    if header_len > MAX_HEADER_LEN {
        return Err(NpyErrorKind::Header {
            reason: format!(
                "it is {header_len} bytes long, more than the {MAX_HEADER_LEN} accepted"
            ),
        });
    }
    if (header_len as u64) > left {
        return Err(NpyErrorKind::Truncated {
            part: NpyPart::Header,
            expected: header_len as u64,
            available: left,
        });
    }
    let mut text = vec![0u8; header_len];
    r.read_exact(&mut text)
        .map_err(truncated_or_io(NpyPart::Header, header_len as u64, left))?;
    left -= header_len as u64;
    let header = parse_header(&text, utf8)?;

    // Dtype, order, shape.
    let descr = match header.descr {
        Lit::Str(s) => s,
        other => {
            return Err(NpyErrorKind::UnsupportedDType {
                descr: other.to_string(),
            })
        }
    };
    let stored = match unicode_descr(&descr) {
        Some(unicode) if unicode.width > 0 => Stored::Unicode(unicode),
        Some(_) => return Err(NpyErrorKind::UnsupportedDType { descr }),
        None => Stored::Fixed(lookup_descr(&descr).ok_or_else(|| unsupported_descr(&descr))?),
    };
    if header.fortran_order {
        return Err(NpyErrorKind::FortranOrder);
    }
    let overflow = || NpyErrorKind::ShapeOverflow {
        shape: header.shape.clone(),
        descr: descr.clone(),
    };
    let shape: Vec<usize> = header
        .shape
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<Result<_, _>>()
        .map_err(|_| overflow())?;
    let nbytes = match stored {
        Stored::Fixed(dtype) => checked_nbytes(dtype, &shape).ok(),
        Stored::Unicode(unicode) => unicode.nbytes(&shape),
    }
    .ok_or_else(overflow)?;
    let expected = nbytes as u64;
    if expected > left {
        return Err(NpyErrorKind::Truncated {
            part: NpyPart::Payload,
            expected,
            available: left,
        });
    }
    if expected < left {
        return Err(NpyErrorKind::TrailingBytes {
            expected,
            actual: left,
        });
    }

    // Payload: straight into a buffer of the exact size, which the tensor then owns.
    let mut data = Vec::new();
    data.try_reserve_exact(nbytes)
        .map_err(|_| NpyErrorKind::OutOfMemory { bytes: nbytes })?;
    (&mut r)
        .take(expected)
        .read_to_end(&mut data)
        .map_err(io_error("read"))?;
    if data.len() != nbytes {
        // The file shrank while we read it.
        return Err(NpyErrorKind::Truncated {
            part: NpyPart::Payload,
            expected,
            available: data.len() as u64,
        });
    }
    let mut probe = [0u8; 1];
    if read_up_to(&mut r, &mut probe)? != 0 {
        // The file grew while we read it.
        return Err(NpyErrorKind::TrailingBytes {
            expected,
            actual: expected + 1,
        });
    }
    let tensor = match stored {
        Stored::Fixed(dtype) => Tensor::from_bytes(dtype, shape, data).map_err(|e| match e {
            scatterjit::ir::Error::InvalidBool { offset, byte } => {
                NpyErrorKind::InvalidBool { offset, byte }
            }
            other => NpyErrorKind::Tensor(other),
        })?,
        Stored::Unicode(unicode) => unicode.decode(&shape, &data)?,
    };
    Ok(NpyArray { tensor, descr })
}

/// How the payload stores one element.
#[derive(Clone, Copy)]
enum Stored {
    /// The bytes of a dtype of the table.
    Fixed(DType),
    /// numpy's fixed-width unicode, read as a string.
    Unicode(Unicode),
}

/// numpy's `U{width}`: `width` UTF-32 code units per element, NUL-padded at the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Unicode {
    width: usize,
    big_endian: bool,
}

/// The unicode layout of `descr` (`<U5`; `=` and `|` read as `<`, `>` is big-endian; no
/// digits is width 0), or `None` if it is not a unicode descr. A width beyond `usize`
/// saturates, so the payload size overflows and the shape is reported.
fn unicode_descr(descr: &str) -> Option<Unicode> {
    let big_endian = match descr.as_bytes().first()? {
        b'<' | b'=' | b'|' => false,
        b'>' => true,
        _ => return None,
    };
    let digits = descr[1..].strip_prefix('U')?;
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(Unicode {
        width: if digits.is_empty() {
            0
        } else {
            digits.parse().unwrap_or(usize::MAX)
        },
        big_endian,
    })
}

impl Unicode {
    /// Payload bytes of `shape`, if they and one element's bytes fit in memory.
    fn nbytes(self, shape: &[usize]) -> Option<usize> {
        let element = self.width.checked_mul(4)?;
        scatterjit::ir::checked_numel(shape)
            .ok()?
            .checked_mul(element)
            .filter(|&n| n <= isize::MAX as usize)
    }

    /// The string tensor of `shape` stored in `payload` (of exactly [`Unicode::nbytes`]).
    fn decode(self, shape: &[usize], payload: &[u8]) -> KindResult<Tensor> {
        let numel = payload.len() / (4 * self.width);
        let mut values: Vec<String> = Vec::new();
        values
            .try_reserve_exact(numel)
            .map_err(|_| NpyErrorKind::OutOfMemory {
                bytes: numel.saturating_mul(std::mem::size_of::<String>()),
            })?;
        for (offset, element) in payload.chunks_exact(4 * self.width).enumerate() {
            let units = element.chunks_exact(4).map(|b| {
                let b = [b[0], b[1], b[2], b[3]];
                if self.big_endian {
                    u32::from_be_bytes(b)
                } else {
                    u32::from_le_bytes(b)
                }
            });
            let len = units
                .clone()
                .rposition(|u| u != 0)
                .map_or(0, |last| last + 1);
            let text = units
                .take(len)
                .enumerate()
                .map(|(index, value)| {
                    char::from_u32(value).ok_or(NpyErrorKind::InvalidCodePoint {
                        offset,
                        index,
                        value,
                    })
                })
                .collect::<KindResult<String>>()?;
            values.push(text);
        }
        Tensor::from_strings(shape, values).map_err(NpyErrorKind::Tensor)
    }

    /// `strings` as `shape`'s payload; the width is the longest string's (at least 1).
    fn encode(
        big_endian: bool,
        shape: &[usize],
        strings: &[String],
    ) -> KindResult<(Unicode, Vec<u8>)> {
        let width = strings
            .iter()
            .map(|s| s.chars().count())
            .max()
            .unwrap_or(0)
            .max(1);
        let unicode = Unicode { width, big_endian };
        let descr = unicode.descr();
        let nbytes = unicode
            .nbytes(shape)
            .ok_or_else(|| NpyErrorKind::ShapeOverflow {
                shape: shape.iter().map(|&d| d as u64).collect(),
                descr: descr.clone(),
            })?;
        let mut payload = Vec::new();
        payload
            .try_reserve_exact(nbytes)
            .map_err(|_| NpyErrorKind::OutOfMemory { bytes: nbytes })?;
        for s in strings {
            let end = payload.len() + 4 * width;
            for c in s.chars() {
                let unit = u32::from(c);
                payload.extend_from_slice(&if big_endian {
                    unit.to_be_bytes()
                } else {
                    unit.to_le_bytes()
                });
            }
            payload.resize(end, 0);
        }
        Ok((unicode, payload))
    }

    /// The descr numpy writes for this layout (`<U5`, `>U5`).
    fn descr(self) -> String {
        let order = if self.big_endian { '>' } else { '<' };
        format!("{order}U{}", self.width)
    }
}

/// Fills `buf` as far as the reader allows; returns the number of bytes read.
fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> KindResult<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_error("read")(e)),
        }
    }
    Ok(n)
}

fn truncated_or_io(
    part: NpyPart,
    expected: u64,
    available: u64,
) -> impl FnOnce(io::Error) -> NpyErrorKind {
    move |error| {
        if error.kind() == io::ErrorKind::UnexpectedEof {
            NpyErrorKind::Truncated {
                part,
                expected,
                available,
            }
        } else {
            io_error("read")(error)
        }
    }
}

/// The dtype of a descr: [`DType::from_npy_descr`], plus one-byte types spelled with `>`.
fn lookup_descr(descr: &str) -> Option<DType> {
    if let Some(d) = DType::from_npy_descr(descr) {
        return Some(d);
    }
    let rest = descr.strip_prefix('>')?;
    DType::from_npy_descr(&format!("|{rest}")).filter(|d| d.size() == 1)
}

/// Why a descr outside the table is refused.
fn unsupported_descr(descr: &str) -> NpyErrorKind {
    let descr_owned = descr.to_string();
    match parse_type_str(descr) {
        Some(ts)
            if matches!(
                ts.type_char(),
                npyz::TypeChar::UnicodeStr | npyz::TypeChar::ByteStr
            ) =>
        {
            NpyErrorKind::StringDType { descr: descr_owned }
        }
        Some(ts) if ts.endianness() == npyz::Endianness::Big => {
            NpyErrorKind::BigEndian { descr: descr_owned }
        }
        _ => NpyErrorKind::UnsupportedDType { descr: descr_owned },
    }
}

/// npyz's reading of a numpy type string, with `=` (native, little-endian here) accepted.
fn parse_type_str(descr: &str) -> Option<npyz::TypeStr> {
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

fn lowercase_first(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Text with control characters escaped, so that a message stays on one line.
struct Printable<'a>(&'a str);

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
struct ShapeText<'a, T>(&'a [T]);

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

// ---------------------------------------------------------------------------------------------
// Header parsing: the Python literal subset numpy writes.

/// A parsed Python literal.
#[derive(Clone, Debug, PartialEq)]
enum Lit {
    Str(String),
    /// An integer; `None` if it does not fit in a u64 (or is negative).
    Int(Option<u64>),
    Bool(bool),
    None,
    Tuple(Vec<Lit>),
    List(Vec<Lit>),
    Dict(Vec<(Lit, Lit)>),
}

impl fmt::Display for Lit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn seq(f: &mut fmt::Formatter<'_>, items: &[Lit], open: &str, close: &str) -> fmt::Result {
            f.write_str(open)?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                item.fmt(f)?;
            }
            if open == "(" && items.len() == 1 {
                f.write_str(",")?;
            }
            f.write_str(close)
        }
        match self {
            Lit::Str(s) => write!(f, "'{}'", Printable(s)),
            Lit::Int(Some(v)) => write!(f, "{v}"),
            Lit::Int(None) => f.write_str("<large or negative integer>"),
            Lit::Bool(true) => f.write_str("True"),
            Lit::Bool(false) => f.write_str("False"),
            Lit::None => f.write_str("None"),
            Lit::Tuple(items) => seq(f, items, "(", ")"),
            Lit::List(items) => seq(f, items, "[", "]"),
            Lit::Dict(items) => {
                f.write_str("{")?;
                for (i, (k, v)) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k}: {v}")?;
                }
                f.write_str("}")
            }
        }
    }
}

/// The three fields of a header.
struct Header {
    descr: Lit,
    fortran_order: bool,
    shape: Vec<u64>,
}

fn header_error(reason: impl Into<String>) -> NpyErrorKind {
    NpyErrorKind::Header {
        reason: reason.into(),
    }
}

fn parse_header(text: &[u8], utf8: bool) -> KindResult<Header> {
    let mut p = LitParser {
        s: text,
        pos: 0,
        utf8,
        depth: 0,
    };
    let value = p.value().map_err(header_error)?;
    p.skip_ws();
    if p.pos != text.len() {
        return Err(header_error(format!(
            "unexpected {} after the dict at byte {}",
            describe_byte(text[p.pos]),
            p.pos
        )));
    }
    let Lit::Dict(entries) = value else {
        return Err(header_error(format!("expected a dict, found {value}")));
    };
    let (mut descr, mut fortran_order, mut shape) = (None, None, None);
    for (key, value) in entries {
        let slot = match &key {
            Lit::Str(k) if k == "descr" => &mut descr,
            Lit::Str(k) if k == "fortran_order" => &mut fortran_order,
            Lit::Str(k) if k == "shape" => &mut shape,
            _ => return Err(header_error(format!("unexpected key {key}"))),
        };
        if slot.replace(value).is_some() {
            return Err(header_error(format!("key {key} appears twice")));
        }
    }
    let missing = |name: &str| header_error(format!("the key '{name}' is missing"));
    let descr = descr.ok_or_else(|| missing("descr"))?;
    let fortran_order = match fortran_order.ok_or_else(|| missing("fortran_order"))? {
        Lit::Bool(b) => b,
        other => {
            return Err(header_error(format!(
                "'fortran_order' is {other}, expected True or False"
            )))
        }
    };
    let shape = match shape.ok_or_else(|| missing("shape"))? {
        Lit::Tuple(items) => items
            .iter()
            .map(|d| match d {
                Lit::Int(Some(v)) => Ok(*v),
                other => Err(header_error(format!(
                    "shape dimension {other} is not an integer in [0, 2^64)"
                ))),
            })
            .collect::<KindResult<Vec<u64>>>()?,
        other => {
            return Err(header_error(format!(
                "'shape' is {other}, expected a tuple of integers"
            )))
        }
    };
    Ok(Header {
        descr,
        fortran_order,
        shape,
    })
}

fn describe_byte(b: u8) -> String {
    if b.is_ascii_graphic() {
        format!("'{}'", b as char)
    } else {
        format!("byte 0x{b:02x}")
    }
}

struct LitParser<'a> {
    s: &'a [u8],
    pos: usize,
    utf8: bool,
    depth: usize,
}

impl LitParser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r' | b'\x0c')) {
            self.pos += 1;
        }
    }

    fn unexpected(&self) -> String {
        match self.peek() {
            Some(b) => format!("unexpected {} at byte {}", describe_byte(b), self.pos),
            None => "unexpected end of the header".to_string(),
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        self.skip_ws();
        if self.peek() == Some(b) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn value(&mut self) -> Result<Lit, String> {
        self.skip_ws();
        match self.peek() {
            Some(b'{') => self.nested(|p| p.dict()),
            Some(b'(') => self.nested(|p| p.tuple()),
            Some(b'[') => self.nested(|p| {
                p.pos += 1;
                p.items(b']').map(Lit::List)
            }),
            Some(b'\'' | b'"') => self.string(),
            Some(b'u' | b'U' | b'b' | b'B')
                if matches!(self.s.get(self.pos + 1), Some(b'\'' | b'"')) =>
            {
                self.pos += 1;
                self.string()
            }
            Some(b'-' | b'+' | b'0'..=b'9') => self.int(),
            Some(b) if b.is_ascii_alphabetic() || b == b'_' => self.name(),
            _ => Err(self.unexpected()),
        }
    }

    fn nested(&mut self, f: impl FnOnce(&mut Self) -> Result<Lit, String>) -> Result<Lit, String> {
        self.depth += 1;
        if self.depth > MAX_HEADER_DEPTH {
            return Err(format!("brackets nested more than {MAX_HEADER_DEPTH} deep"));
        }
        let v = f(self);
        self.depth -= 1;
        v
    }

    /// Comma-separated values up to `close`; the bool is whether a comma was seen.
    fn items_commas(&mut self, close: u8) -> Result<(Vec<Lit>, bool), String> {
        let mut items = Vec::new();
        let mut comma = false;
        loop {
            if self.eat(close) {
                return Ok((items, comma));
            }
            items.push(self.value()?);
            if self.eat(b',') {
                comma = true;
            } else if self.eat(close) {
                return Ok((items, comma));
            } else {
                return Err(self.unexpected());
            }
        }
    }

    fn items(&mut self, close: u8) -> Result<Vec<Lit>, String> {
        self.items_commas(close).map(|(items, _)| items)
    }

    fn tuple(&mut self) -> Result<Lit, String> {
        self.pos += 1;
        let (mut items, comma) = self.items_commas(b')')?;
        // `(3)` is the integer 3 in Python; a tuple needs a comma or no items.
        if items.len() == 1 && !comma {
            return Ok(items.remove(0));
        }
        Ok(Lit::Tuple(items))
    }

    fn dict(&mut self) -> Result<Lit, String> {
        self.pos += 1;
        let mut entries = Vec::new();
        loop {
            if self.eat(b'}') {
                return Ok(Lit::Dict(entries));
            }
            let key = self.value()?;
            if !self.eat(b':') {
                return Err(self.unexpected());
            }
            let value = self.value()?;
            entries.push((key, value));
            if !self.eat(b',') {
                if self.eat(b'}') {
                    return Ok(Lit::Dict(entries));
                }
                return Err(self.unexpected());
            }
        }
    }

    fn string(&mut self) -> Result<Lit, String> {
        let quote = self.s[self.pos];
        let start = self.pos;
        self.pos += 1;
        let mut bytes = Vec::new();
        loop {
            let Some(b) = self.peek() else {
                return Err(format!("string opened at byte {start} is not closed"));
            };
            self.pos += 1;
            match b {
                _ if b == quote => break,
                b'\n' => return Err(format!("string opened at byte {start} is not closed")),
                b'\\' => {
                    let Some(e) = self.peek() else {
                        return Err(format!("string opened at byte {start} is not closed"));
                    };
                    self.pos += 1;
                    match e {
                        b'\\' | b'\'' | b'"' => bytes.push(e),
                        b'n' => bytes.push(b'\n'),
                        b't' => bytes.push(b'\t'),
                        b'r' => bytes.push(b'\r'),
                        b'0' => bytes.push(0),
                        b'x' => {
                            let hex = self
                                .s
                                .get(self.pos..self.pos + 2)
                                .and_then(|h| std::str::from_utf8(h).ok())
                                .and_then(|h| u8::from_str_radix(h, 16).ok())
                                .ok_or_else(|| format!("bad \\x escape at byte {}", self.pos))?;
                            self.pos += 2;
                            bytes.push(hex);
                        }
                        other => {
                            return Err(format!(
                                "unsupported escape \\{} at byte {}",
                                other.escape_ascii(),
                                self.pos - 1
                            ))
                        }
                    }
                }
                _ => bytes.push(b),
            }
        }
        let text = if self.utf8 {
            String::from_utf8(bytes)
                .map_err(|_| format!("string at byte {start} is not valid UTF-8"))?
        } else {
            // Versions 1.0 and 2.0 store the header as latin-1.
            bytes.iter().map(|&b| b as char).collect()
        };
        Ok(Lit::Str(text))
    }

    fn int(&mut self) -> Result<Lit, String> {
        let negative = match self.peek() {
            Some(b'-') => {
                self.pos += 1;
                true
            }
            Some(b'+') => {
                self.pos += 1;
                false
            }
            _ => false,
        };
        let start = self.pos;
        let mut value: Option<u64> = Some(0);
        while let Some(d @ b'0'..=b'9') = self.peek() {
            value = value
                .and_then(|v| v.checked_mul(10))
                .and_then(|v| v.checked_add(u64::from(d - b'0')));
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.unexpected());
        }
        // Python 2 wrote long integers with an `L` suffix.
        if matches!(self.peek(), Some(b'L' | b'l')) {
            self.pos += 1;
        }
        if negative && value != Some(0) {
            value = None;
        }
        Ok(Lit::Int(value))
    }

    fn name(&mut self) -> Result<Lit, String> {
        let start = self.pos;
        while matches!(self.peek(), Some(b) if b.is_ascii_alphanumeric() || b == b'_') {
            self.pos += 1;
        }
        match &self.s[start..self.pos] {
            b"True" => Ok(Lit::Bool(true)),
            b"False" => Ok(Lit::Bool(false)),
            b"None" => Ok(Lit::None),
            other => Err(format!(
                "unexpected name '{}' at byte {start}",
                other.escape_ascii()
            )),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Writing

/// The header and payload of `tensor` written with `descr`, which must describe its dtype.
/// A string tensor's payload is encoded here; any other tensor's is its bytes.
fn encode<'a>(tensor: &'a Tensor, descr: &str) -> KindResult<(Vec<u8>, Cow<'a, [u8]>)> {
    let dtype = tensor.dtype();
    let mismatch = || NpyErrorKind::DescrMismatch {
        descr: descr.to_string(),
        dtype,
    };
    if dtype == DType::String {
        let big_endian = unicode_descr(descr).ok_or_else(mismatch)?.big_endian;
        let strings = tensor.strings().map_err(NpyErrorKind::Tensor)?;
        let (unicode, payload) = Unicode::encode(big_endian, tensor.shape(), strings)?;
        let header = header_bytes(tensor.shape(), &unicode.descr())?;
        return Ok((header, Cow::Owned(payload)));
    }
    if lookup_descr(descr) != Some(dtype) {
        return Err(mismatch());
    }
    let header = header_bytes(tensor.shape(), descr)?;
    Ok((header, Cow::Borrowed(tensor.bytes())))
}

/// The header (preamble and padded dict text) of an array of `shape`, written with `descr`.
/// Version 1.0 unless the text needs more than 65535 bytes (then 2.0).
fn header_bytes(shape: &[usize], descr: &str) -> KindResult<Vec<u8>> {
    let dict = format!(
        "{{'descr': '{descr}', 'fortran_order': False, 'shape': {}, }}",
        ShapeText(shape)
    );
    // Preamble + dict + padding + '\n' is a multiple of ALIGN.
    let padded = |preamble: usize| (preamble + dict.len() + 1).div_ceil(ALIGN) * ALIGN - preamble;
    let (version, text_len) = if padded(10) <= usize::from(u16::MAX) {
        (1u8, padded(10))
    } else {
        (2u8, padded(12))
    };
    let mut out = Vec::with_capacity(12 + text_len);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[version, 0]);
    if version == 1 {
        // Fits: checked above.
        out.extend_from_slice(&(text_len as u16).to_le_bytes());
    } else {
        let len =
            u32::try_from(text_len).map_err(|_| NpyErrorKind::HeaderTooLong { len: text_len })?;
        out.extend_from_slice(&len.to_le_bytes());
    }
    out.extend_from_slice(dict.as_bytes());
    out.resize(out.len() + text_len - dict.len() - 1, b' ');
    out.push(b'\n');
    Ok(out)
}

/// The complete `.npy` file image of `tensor`, with `descr` in its header (which must
/// describe the tensor's dtype, e.g. `<f4` or `=f4` for f32, `<V2` for bf16; any unicode
/// descr for strings, which are written with the width of the longest one).
///
/// ```
/// use scatterjit::Tensor;
/// use scatterjit_cli::npy;
/// let t = Tensor::from_slice(&[3], &[1u8, 2, 3]).unwrap();
/// let bytes = npy::to_bytes(&t, "|u1").unwrap();
/// assert!(bytes.starts_with(b"\x93NUMPY\x01\x00"));
/// assert_eq!(bytes.len(), 128 + 3); // header padded to a multiple of 64 bytes
/// assert!(npy::to_bytes(&t, "<f4").is_err());
/// ```
pub fn to_bytes(tensor: &Tensor, descr: &str) -> Result<Vec<u8>, NpyError> {
    let (mut out, payload) = encode(tensor, descr)?;
    out.reserve_exact(payload.len());
    out.extend_from_slice(&payload);
    Ok(out)
}

/// Writes `tensor` to `path` as a C-order `.npy` file with `descr` in its header (see
/// [`to_bytes`]; little-endian, but for strings given a `>U` descr), atomically: the data goes to a temporary file in the same directory, which is
/// synced and then renamed over `path`. On any error the temporary file is removed and
/// `path` is left as it was (absent, or with its old contents).
pub fn write(path: impl AsRef<Path>, tensor: &Tensor, descr: &str) -> Result<(), NpyError> {
    let path = path.as_ref();
    let (header, payload) = encode(tensor, descr).map_err(|kind| NpyError::at(path, kind))?;
    write_atomic(path, &[&header, &payload]).map_err(|kind| NpyError::at(path, kind))
}

fn write_atomic(path: &Path, parts: &[&[u8]]) -> KindResult<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let (tmp, mut file) = create_temp(dir)?;
    let result = (|| {
        for part in parts {
            file.write_all(part).map_err(io_error("write"))?;
        }
        file.sync_all().map_err(io_error("sync"))?;
        drop(file);
        fs::rename(&tmp, path).map_err(io_error("replace the file"))
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
        return result;
    }
    sync_dir(dir);
    Ok(())
}

/// Creates a new, uniquely named file in `dir`.
fn create_temp(dir: &Path) -> KindResult<(PathBuf, File)> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut attempt = 0;
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = dir.join(format!(".scatterjit-{}-{n}.npy.tmp", std::process::id()));
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 100 => attempt += 1,
            Err(e) => return Err(io_error("create a temporary file next to it")(e)),
        }
    }
}

/// Makes the rename durable where the platform allows it. The rename has happened already,
/// so a failure here is not reported.
fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    #[cfg(not(unix))]
    let _ = dir;
}

#[cfg(test)]
mod unicode_tests {
    use super::*;

    /// A version 1.0 file image of `descr` and `shape` (numpy's spelling) over `payload`.
    fn image(descr: &str, shape: &str, payload: &[u8]) -> Vec<u8> {
        let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
        let len = (10 + dict.len() + 1).div_ceil(ALIGN) * ALIGN - 10;
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(len as u16).to_le_bytes());
        out.extend_from_slice(dict.as_bytes());
        out.resize(10 + len - 1, b' ');
        out.push(b'\n');
        out.extend_from_slice(payload);
        out
    }

    fn utf32(units: &[u32], big_endian: bool) -> Vec<u8> {
        units
            .iter()
            .flat_map(|u| {
                if big_endian {
                    u.to_be_bytes()
                } else {
                    u.to_le_bytes()
                }
            })
            .collect()
    }

    fn strings(shape: &[usize], values: &[&str]) -> Tensor {
        Tensor::from_strings(shape, values.iter().copied()).unwrap()
    }

    #[test]
    fn writes_what_numpy_writes() {
        // np.save of np.array(['ab', 'c']): '<U2', NUL-padded UTF-32LE.
        let a = u32::from('a');
        let expected = image("<U2", "(2,)", &utf32(&[a, a + 1, a + 2, 0], false));
        assert_eq!(
            to_bytes(&strings(&[2], &["ab", "c"]), "<U").unwrap(),
            expected
        );
        // Any width in the descr: the longest string decides.
        assert_eq!(
            to_bytes(&strings(&[2], &["ab", "c"]), "<U9").unwrap(),
            expected
        );
        let back = from_bytes(&expected).unwrap();
        assert_eq!(back.descr, "<U2");
        assert_eq!(back.tensor, strings(&[2], &["ab", "c"]));
    }

    #[test]
    fn round_trips_text_of_any_script() {
        let values = ["", "é", "日本語", "🦀 crab", "a\0b", "ÿ"];
        for (shape, n) in [(&[][..], 1), (&[0][..], 0), (&[6][..], 6), (&[2, 3][..], 6)] {
            for descr in ["<U", "=U3", ">U1"] {
                let t = strings(shape, &values[..n]);
                let back = from_bytes(&to_bytes(&t, descr).unwrap()).unwrap();
                assert_eq!(back.tensor, t, "{shape:?} {descr}");
                assert_eq!(back.descr.starts_with('>'), descr.starts_with('>'));
            }
        }
        // Every string empty (or none at all) still gets width 1, as numpy gives.
        let bytes = to_bytes(&strings(&[2], &["", ""]), "<U").unwrap();
        assert_eq!(from_bytes(&bytes).unwrap().descr, "<U1");
    }

    #[test]
    fn trailing_nuls_are_padding() {
        let payload = utf32(&[0x61, 0, 0x62, 0, 0, 0, 0, 0], false);
        let t = from_bytes(&image("<U4", "(2,)", &payload)).unwrap().tensor;
        assert_eq!(t.strings().unwrap(), ["a\0b", ""]);
    }

    #[test]
    fn big_endian_reads() {
        let payload = utf32(&[0x65e5, 0x1f980], true);
        let t = from_bytes(&image(">U1", "(2,)", &payload)).unwrap().tensor;
        assert_eq!(t.strings().unwrap(), ["日", "🦀"]);
    }

    #[test]
    fn invalid_code_points_name_the_element() {
        for bad in [0xD800u32, 0x11_0000, u32::MAX] {
            let payload = utf32(&[0x61, 0, 0x62, bad], false);
            let k = from_bytes(&image("<U2", "(2,)", &payload))
                .unwrap_err()
                .into_kind();
            assert!(
                matches!(
                    k,
                    NpyErrorKind::InvalidCodePoint { offset: 1, index: 1, value } if value == bad
                ),
                "{k:?}"
            );
        }
        let dir = std::env::temp_dir().join(format!("scatterjit-unicode-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("bad.npy");
        fs::write(&path, image("<U1", "(1,)", &utf32(&[0xDFFF], false))).unwrap();
        let msg = read(&path).unwrap_err().to_string();
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(
            msg,
            format!(
                "{}: string element 0 has 0xDFFF at character 0, which is not a unicode scalar value",
                path.display()
            )
        );
    }

    #[test]
    fn sizes_are_checked_before_reading() {
        let k = from_bytes(&image("<U3", "(2,)", &[0; 23]))
            .unwrap_err()
            .into_kind();
        assert!(
            matches!(
                k,
                NpyErrorKind::Truncated {
                    part: NpyPart::Payload,
                    expected: 24,
                    available: 23
                }
            ),
            "{k:?}"
        );
        for (descr, shape) in [
            ("<U4611686018427387904", "(2,)"),
            ("<U4611686018427387904", "(0,)"),
            ("<U99999999999999999999999", "(2,)"),
        ] {
            let k = from_bytes(&image(descr, shape, &[]))
                .unwrap_err()
                .into_kind();
            assert!(
                matches!(k, NpyErrorKind::ShapeOverflow { .. }),
                "{descr}: {k:?}"
            );
        }
        // numpy never writes a zero width; with it, no payload would bound the shape.
        let k = from_bytes(&image("<U0", "(1000000000000,)", &[]))
            .unwrap_err()
            .into_kind();
        assert!(matches!(k, NpyErrorKind::UnsupportedDType { .. }), "{k:?}");
        for descr in ["<Ux", "<U", "<U-1", "U5"] {
            let k = from_bytes(&image(descr, "(1,)", &[0; 4]))
                .unwrap_err()
                .into_kind();
            assert!(
                matches!(k, NpyErrorKind::UnsupportedDType { .. }),
                "{descr}: {k:?}"
            );
        }
    }

    #[test]
    fn descrs_must_match_on_write() {
        let text = strings(&[1], &["x"]);
        let e = to_bytes(&text, "<f4").unwrap_err();
        assert!(
            matches!(e.kind(), NpyErrorKind::DescrMismatch { .. }),
            "{e}"
        );
        let numbers = Tensor::from_slice(&[1], &[1.0f32]).unwrap();
        let e = to_bytes(&numbers, "<U1").unwrap_err();
        assert!(
            matches!(e.kind(), NpyErrorKind::DescrMismatch { .. }),
            "{e}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system's temporary directory, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            static N: AtomicU64 = AtomicU64::new(0);
            let dir = std::env::temp_dir().join(format!(
                "scatterjit-npy-{}-{}-{name}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }
        fn path(&self, name: &str) -> PathBuf {
            self.0.join(name)
        }
        fn entries(&self) -> Vec<String> {
            let mut v: Vec<String> = fs::read_dir(&self.0)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            v.sort();
            v
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    /// A tensor of `dtype` and `shape` with varied, valid bytes.
    fn sample(dtype: DType, shape: &[usize]) -> Tensor {
        let n = checked_nbytes(dtype, shape).unwrap();
        let bytes = (0..n)
            .map(|i| {
                if dtype == DType::Bool {
                    (i % 3 == 1) as u8
                } else {
                    (i * 37 + 11) as u8
                }
            })
            .collect();
        Tensor::from_bytes(dtype, shape.to_vec(), bytes).unwrap()
    }

    /// A file image with the given version and header text (padding and newline added).
    fn image(version: (u8, u8), dict: &str, payload: &[u8]) -> Vec<u8> {
        let mut text = dict.as_bytes().to_vec();
        text.push(b'\n');
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&[version.0, version.1]);
        if version.0 == 1 {
            out.extend_from_slice(&(text.len() as u16).to_le_bytes());
        } else {
            out.extend_from_slice(&(text.len() as u32).to_le_bytes());
        }
        out.extend_from_slice(&text);
        out.extend_from_slice(payload);
        out
    }

    fn dict(descr: &str, fortran: &str, shape: &str) -> String {
        format!("{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, }}")
    }

    fn kind_of(bytes: &[u8]) -> NpyErrorKind {
        from_bytes(bytes).unwrap_err().into_kind()
    }

    fn header_reason(bytes: &[u8]) -> String {
        match kind_of(bytes) {
            NpyErrorKind::Header { reason } => reason,
            other => panic!("expected a header error, got {other:?}"),
        }
    }

    #[test]
    fn round_trip_every_dtype() {
        let shapes: &[&[usize]] = &[&[], &[0], &[3], &[2, 3], &[2, 0, 4], &[1, 2, 1, 3]];
        for &dtype in DType::ALL.iter().filter(|&&d| d != DType::String) {
            for shape in shapes {
                let t = sample(dtype, shape);
                let bytes = to_bytes(&t, dtype.npy_descr()).unwrap();
                let header_len = bytes.len() - t.bytes().len();
                assert_eq!(header_len % ALIGN, 0, "{dtype} {shape:?}");
                assert_eq!(bytes[header_len - 1], b'\n');
                let back = from_bytes(&bytes).unwrap();
                assert_eq!(back.tensor, t, "{dtype} {shape:?}");
                assert_eq!(back.descr, dtype.npy_descr());
            }
        }
    }

    #[test]
    fn header_text_matches_numpy() {
        let text = |t: &Tensor, descr: &str| {
            let bytes = to_bytes(t, descr).unwrap();
            let end = bytes.iter().position(|&b| b == b'\n').unwrap();
            String::from_utf8(bytes[10..end].to_vec()).unwrap()
        };
        assert_eq!(
            text(&sample(DType::F32, &[2, 3]), "<f4").trim_end(),
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
        );
        assert!(text(&sample(DType::U8, &[3]), "|u1").contains("'shape': (3,), }"));
        assert!(text(&sample(DType::I64, &[]), "<i8").contains("'shape': (), }"));
    }

    #[test]
    fn descr_spellings_are_kept() {
        for (descr, dtype) in [
            ("=f4", DType::F32),
            ("|u1", DType::U8),
            ("<u1", DType::U8),
            (">u1", DType::U8),
            (">i1", DType::I8),
            ("=b1", DType::Bool),
            ("<V2", DType::BF16),
            ("=c16", DType::Complex128),
        ] {
            let t = sample(dtype, &[2, 2]);
            let back = from_bytes(&to_bytes(&t, descr).unwrap()).unwrap();
            assert_eq!(back.descr, descr);
            assert_eq!(back.tensor, t);
        }
    }

    #[test]
    fn long_headers_use_version_2() {
        let shape = vec![1usize; 30_000];
        let t = sample(DType::I16, &shape);
        let bytes = to_bytes(&t, "<i2").unwrap();
        assert_eq!(&bytes[6..8], &[2, 0]);
        assert_eq!((bytes.len() - 2) % ALIGN, 0);
        assert_eq!(from_bytes(&bytes).unwrap().tensor, t);
    }

    #[test]
    fn versions_2_and_3_and_python_spellings() {
        let payload = 7i32.to_le_bytes();
        for version in [(1, 0), (2, 0), (3, 0)] {
            let a = from_bytes(&image(version, &dict("<i4", "False", "(1,)"), &payload)).unwrap();
            assert_eq!(a.tensor.to_vec::<i32>().unwrap(), [7]);
        }
        // Python 2 longs, double quotes, odd spacing, key order, no trailing comma.
        let text = "{\"shape\":(1L,),'fortran_order' :False ,  'descr':u'<i4'}";
        let a = from_bytes(&image((1, 0), text, &payload)).unwrap();
        assert_eq!(a.tensor.shape(), [1]);
        // Version 3.0 headers are UTF-8; 1.0 headers are latin-1 (a non-ASCII byte is a char).
        let bad = image(
            (3, 0),
            &dict("<i4", "False", "(1,)").replace("<i4", "<\u{e9}4"),
            &payload,
        );
        assert!(matches!(
            kind_of(&bad),
            NpyErrorKind::UnsupportedDType { .. }
        ));
    }

    #[test]
    fn interoperates_with_npyz() {
        use npyz::WriterBuilder;
        let mut buf = Vec::new();
        let mut w = npyz::WriteOptions::new()
            .default_dtype()
            .shape(&[2, 3])
            .writer(&mut buf)
            .begin_nd()
            .unwrap();
        w.extend([1.5f64, -2.0, 3.25, 0.0, 1e300, -0.5]).unwrap();
        w.finish().unwrap();
        let a = from_bytes(&buf).unwrap();
        assert_eq!(a.descr, "<f8");
        assert_eq!(a.tensor.shape(), [2, 3]);
        assert_eq!(
            a.tensor.to_vec::<f64>().unwrap(),
            [1.5, -2.0, 3.25, 0.0, 1e300, -0.5]
        );

        let t = Tensor::from_slice(&[2, 2], &[1i16, -2, 300, -400]).unwrap();
        let ours = to_bytes(&t, "<i2").unwrap();
        let npy = npyz::NpyFile::new(&ours[..]).unwrap();
        assert_eq!(npy.shape(), &[2, 2]);
        assert_eq!(npy.into_vec::<i16>().unwrap(), [1, -2, 300, -400]);
    }

    #[test]
    fn bad_magic() {
        for bytes in [
            &b""[..],
            b"\x93NUM",
            b"PK\x03\x04 not npy at all",
            b"\x93NUMPX\x01\x00",
        ] {
            assert!(
                matches!(kind_of(bytes), NpyErrorKind::BadMagic { .. }),
                "{bytes:?}"
            );
        }
        let msg = from_bytes(b"hello world").unwrap_err().to_string();
        assert!(msg.starts_with("not an .npy file"), "{msg}");
    }

    #[test]
    fn unsupported_version() {
        let mut bytes = image((1, 0), &dict("<i4", "False", "()"), &[0; 4]);
        bytes[6] = 4;
        assert!(matches!(
            kind_of(&bytes),
            NpyErrorKind::UnsupportedVersion { major: 4, minor: 0 }
        ));
    }

    #[test]
    fn truncated_files() {
        let full = image((1, 0), &dict("<i4", "False", "(2, 2)"), &[1; 16]);
        let header_end = full.len() - 16;
        for (cut, part) in [
            (7, NpyPart::Preamble),
            (9, NpyPart::Preamble),
            (12, NpyPart::Header),
            (header_end - 1, NpyPart::Header),
            (header_end, NpyPart::Payload),
            (full.len() - 1, NpyPart::Payload),
        ] {
            match kind_of(&full[..cut]) {
                NpyErrorKind::Truncated { part: p, .. } => assert_eq!(p, part, "cut at {cut}"),
                other => panic!("cut at {cut}: {other:?}"),
            }
        }
        let msg = from_bytes(&full[..full.len() - 1]).unwrap_err().to_string();
        assert_eq!(
            msg,
            "truncated payload: it needs 16 bytes but the file has only 15 left"
        );
    }

    #[test]
    fn huge_shapes_are_refused_before_allocating() {
        // 2^40 f32 elements: fits in usize, but the file has 4 bytes.
        let bytes = image((1, 0), &dict("<f4", "False", "(1099511627776,)"), &[0; 4]);
        assert!(matches!(
            kind_of(&bytes),
            NpyErrorKind::Truncated {
                part: NpyPart::Payload,
                expected: 4398046511104,
                available: 4
            }
        ));
        // Element count overflows.
        let bytes = image(
            (1, 0),
            &dict("<f4", "False", "(4294967296, 4294967296, 4)"),
            &[],
        );
        assert!(matches!(
            kind_of(&bytes),
            NpyErrorKind::ShapeOverflow { .. }
        ));
        // A dimension beyond u64 is a header error.
        let bytes = image(
            (1, 0),
            &dict("<f4", "False", "(99999999999999999999999,)"),
            &[],
        );
        header_reason(&bytes);
        // A header claiming 4 GiB of text.
        let mut bytes = image((2, 0), &dict("<f4", "False", "()"), &[0; 4]);
        bytes[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(kind_of(&bytes), NpyErrorKind::Header { .. }));
        bytes[8..12].copy_from_slice(&1000u32.to_le_bytes());
        assert!(matches!(
            kind_of(&bytes),
            NpyErrorKind::Truncated {
                part: NpyPart::Header,
                ..
            }
        ));
    }

    #[test]
    fn trailing_bytes() {
        let bytes = image((1, 0), &dict("<i4", "False", "(2,)"), &[0; 9]);
        assert!(matches!(
            kind_of(&bytes),
            NpyErrorKind::TrailingBytes {
                expected: 8,
                actual: 9
            }
        ));
    }

    #[test]
    fn malformed_headers() {
        let cases = [
            "[1, 2]",
            "{'descr': '<f4', 'fortran_order': False}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (), 'extra': 1}",
            "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': ()}",
            "{'descr': '<f4', 'fortran_order': 0, 'shape': ()}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': [2]}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2.5,)}",
            "{'descr': '<f4', 'fortran_order': Flase, 'shape': ()}",
            "{'descr': '<f4, 'fortran_order': False, 'shape': ()}",
            "{'descr': '<f4' 'fortran_order': False, 'shape': ()}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': ()} x",
            "{'descr': '<f4', 'fortran_order': False, 'shape': ()}\0",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (",
            "",
        ];
        for text in cases {
            let bytes = image((1, 0), text, &[]);
            let reason = header_reason(&bytes);
            assert!(!reason.is_empty(), "{text}");
        }
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let reason = header_reason(&image((2, 0), &deep, &[]));
        assert!(reason.contains("nested"), "{reason}");
    }

    #[test]
    fn unsupported_dtypes() {
        type Check = fn(&NpyErrorKind) -> bool;
        let cases: &[(&str, Check)] = &[
            (">f4", |k| matches!(k, NpyErrorKind::BigEndian { .. })),
            (">V2", |k| matches!(k, NpyErrorKind::BigEndian { .. })),
            ("<U0", |k| {
                matches!(k, NpyErrorKind::UnsupportedDType { .. })
            }),
            ("|S3", |k| matches!(k, NpyErrorKind::StringDType { .. })),
            ("<m8[s]", |k| {
                matches!(k, NpyErrorKind::UnsupportedDType { .. })
            }),
            ("|O", |k| matches!(k, NpyErrorKind::UnsupportedDType { .. })),
            ("<f16", |k| {
                matches!(k, NpyErrorKind::UnsupportedDType { .. })
            }),
            ("|V4", |k| {
                matches!(k, NpyErrorKind::UnsupportedDType { .. })
            }),
            ("float32", |k| {
                matches!(k, NpyErrorKind::UnsupportedDType { .. })
            }),
        ];
        for (descr, ok) in cases {
            let k = kind_of(&image((1, 0), &dict(descr, "False", "(1,)"), &[0; 4]));
            assert!(ok(&k), "{descr}: {k:?}");
        }
        let msg = from_bytes(&image((1, 0), &dict("|S3", "False", "(1,)"), &[0; 3]))
            .unwrap_err()
            .to_string();
        assert_eq!(
            msg,
            "byte-string dtype '|S3' is not supported (save text as a unicode array, dtype '<U')"
        );
        let structured =
            "{'descr': [('a', '<i4'), ('b', '<f4')], 'fortran_order': False, 'shape': (1,)}";
        let k = kind_of(&image((1, 0), structured, &[0; 8]));
        assert!(matches!(k, NpyErrorKind::UnsupportedDType { .. }), "{k:?}");
        assert!(k.to_string().contains("structured"), "{k}");
    }

    #[test]
    fn fortran_order() {
        let bytes = image((1, 0), &dict("<f4", "True", "(2, 2)"), &[0; 16]);
        assert!(matches!(kind_of(&bytes), NpyErrorKind::FortranOrder));
    }

    #[test]
    fn bool_bytes_must_be_0_or_1() {
        let bytes = image((1, 0), &dict("|b1", "False", "(3,)"), &[0, 1, 2]);
        assert!(matches!(
            kind_of(&bytes),
            NpyErrorKind::InvalidBool { offset: 2, byte: 2 }
        ));
    }

    #[test]
    fn file_round_trip_and_errors_name_the_file() {
        let dir = TempDir::new("files");
        let path = dir.path("a.npy");
        let t = sample(DType::Complex64, &[2, 3]);
        write(&path, &t, "<c8").unwrap();
        let back = read(&path).unwrap();
        assert_eq!(back.tensor, t);
        assert_eq!(back.descr, "<c8");
        assert_eq!(dir.entries(), ["a.npy"]);

        fs::write(&path, b"garbage").unwrap();
        let e = read(&path).unwrap_err();
        assert!(matches!(e.kind(), NpyErrorKind::BadMagic { .. }));
        assert_eq!(e.path(), Some(path.as_path()));
        assert!(e
            .to_string()
            .starts_with(&format!("{}: not an .npy file", path.display())));

        let missing = dir.path("missing.npy");
        let e = read(&missing).unwrap_err();
        assert!(matches!(e.kind(), NpyErrorKind::Io { action: "open", .. }));
        assert!(e.to_string().contains("missing.npy: cannot open: "), "{e}");
    }

    #[test]
    fn read_from_starts_at_the_current_position() {
        let t = sample(DType::U16, &[4]);
        let mut bytes = b"prefix".to_vec();
        bytes.extend(to_bytes(&t, "<u2").unwrap());
        let mut cursor = Cursor::new(bytes);
        cursor.seek(SeekFrom::Start(6)).unwrap();
        assert_eq!(read_from(&mut cursor).unwrap().tensor, t);
    }

    #[test]
    fn write_is_atomic() {
        let dir = TempDir::new("atomic");
        let path = dir.path("out.npy");
        fs::write(&path, b"old contents").unwrap();

        // A descr that does not match: nothing is written.
        let t = sample(DType::I32, &[3]);
        let e = write(&path, &t, "<f4").unwrap_err();
        assert!(matches!(e.kind(), NpyErrorKind::DescrMismatch { .. }));
        assert_eq!(fs::read(&path).unwrap(), b"old contents");

        // The target is a directory: the rename fails, the temporary file is removed.
        let sub = dir.path("sub");
        fs::create_dir(&sub).unwrap();
        fs::write(sub.join("keep"), b"x").unwrap();
        let e = write(&sub, &t, "<i4").unwrap_err();
        assert!(matches!(e.kind(), NpyErrorKind::Io { .. }), "{e}");
        assert_eq!(dir.entries(), ["out.npy", "sub"]);

        // A missing directory: nothing is created.
        let e = write(dir.path("nope/out.npy"), &t, "<i4").unwrap_err();
        assert!(matches!(e.kind(), NpyErrorKind::Io { .. }), "{e}");

        // Success replaces the old file and leaves nothing else behind.
        write(&path, &t, "<i4").unwrap();
        assert_eq!(read(&path).unwrap().tensor, t);
        assert_eq!(dir.entries(), ["out.npy", "sub"]);
    }

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
