//! What the unit tests of the parts share: file images, sample tensors, a scratch directory.

use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use scatterjit::ir::{checked_nbytes, DType, Tensor};

use super::{from_bytes, NpyErrorKind, ALIGN, MAGIC};

/// A fresh directory under the system's temporary directory, removed on drop.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(name: &str) -> TempDir {
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
    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
    pub(crate) fn entries(&self) -> Vec<String> {
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
pub(super) fn sample(dtype: DType, shape: &[usize]) -> Tensor {
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
pub(super) fn image(version: (u8, u8), dict: &str, payload: &[u8]) -> Vec<u8> {
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

pub(super) fn dict(descr: &str, fortran: &str, shape: &str) -> String {
    format!("{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, }}")
}

pub(super) fn kind_of(bytes: &[u8]) -> NpyErrorKind {
    from_bytes(bytes).unwrap_err().into_kind()
}

pub(super) fn header_reason(bytes: &[u8]) -> String {
    match kind_of(bytes) {
        NpyErrorKind::Header { reason } => reason,
        other => panic!("expected a header error, got {other:?}"),
    }
}

/// A version 1.0 file image of `descr` and `shape` (numpy's spelling) over `payload`.
pub(super) fn numpy_image(descr: &str, shape: &str, payload: &[u8]) -> Vec<u8> {
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

pub(super) fn utf32(units: &[u32], big_endian: bool) -> Vec<u8> {
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

pub(super) fn strings(shape: &[usize], values: &[&str]) -> Tensor {
    Tensor::from_strings(shape, values.iter().copied()).unwrap()
}
