//! Reading: the preamble, the header, then the payload straight into the tensor's buffer.

use std::fs::File;
use std::io::{self, Cursor, Read, Seek, SeekFrom};
use std::path::Path;

use scatterjit::ir::{checked_nbytes, DType, Tensor};

use super::error::{io_error, parse_type_str, KindResult, NpyError, NpyErrorKind, NpyPart};
use super::header::{parse_header, Lit};
use super::unicode::{unicode_descr, Unicode};
use super::{NpyArray, MAGIC, MAX_HEADER_LEN};

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
pub(super) fn lookup_descr(descr: &str) -> Option<DType> {
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

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::npy::test_support::*;
    use crate::npy::*;

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
}
