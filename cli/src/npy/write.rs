//! Writing: the header numpy writes, then the payload, atomically.

use std::borrow::Cow;
use std::path::Path;

use scatterjit::ir::{DType, Tensor};

use crate::atomic;

use super::error::{KindResult, NpyError, NpyErrorKind, ShapeText};
use super::read::lookup_descr;
use super::unicode::unicode_descr;
use super::{ALIGN, MAGIC};

/// The header and payload of `tensor` written with `descr`, which must describe its dtype.
/// A string tensor's payload is encoded here; any other tensor's is its bytes.
fn encode<'a>(tensor: &'a Tensor, descr: &str) -> KindResult<(Vec<u8>, Cow<'a, [u8]>)> {
    let dtype = tensor.dtype();
    let mismatch = || NpyErrorKind::DescrMismatch {
        descr: descr.to_string(),
        dtype,
    };
    if dtype == DType::String {
        let layout = unicode_descr(descr).ok_or_else(mismatch)?;
        let strings = tensor.strings().map_err(NpyErrorKind::Tensor)?;
        let (unicode, payload) = layout.encode(tensor.shape(), strings)?;
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
/// descr for strings, whose width is kept unless a longer string widens it).
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
/// [`to_bytes`]; little-endian, but for strings given a `>U` descr), atomically (see
/// [`crate::atomic::write`]): on any error `path` is left as it was (absent, or with its old
/// contents).
pub fn write(path: impl AsRef<Path>, tensor: &Tensor, descr: &str) -> Result<(), NpyError> {
    let path = path.as_ref();
    let (header, payload) = encode(tensor, descr).map_err(|kind| NpyError::at(path, kind))?;
    atomic::write(path, &[&header, &payload]).map_err(|e| {
        let kind = NpyErrorKind::Io {
            action: e.action,
            error: e.error,
        };
        NpyError::at(path, kind)
    })
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::npy::test_support::*;
    use crate::npy::*;

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
}
