//! The body of the `.npy` reader's fuzz target (the cargo-fuzz crate in `fuzz/`) and of its
//! bounded replay in the test suite. The other targets' bodies are in
//! `scatterjit_testkit::fuzzing`. Not a stable API.

use scatterjit::DType;
use scatterjit_testkit::fuzzing::check_message;

use crate::npy;

/// Reads bytes as a `.npy` file. A first byte below `0x80` means the rest is the file; from
/// `0x80` on, the rest is header text up to its first newline and then the payload, and the
/// preamble (magic, version `1 + byte % 3`, header length) is written around them, so that
/// mutations reach the header parser without breaking the length field.
///
/// Promises checked: reading never panics; an error is a one-line message; an array read is
/// exactly the file's tail (nothing more is allocated or invented) and writes back to an
/// image that reads as the same array.
pub fn npy_reader(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return check_npy(data);
    };
    if mode < 0x80 {
        return check_npy(rest);
    }
    let version = 1 + mode % 3;
    let split = rest
        .iter()
        .position(|&b| b == b'\n')
        .map_or(rest.len(), |p| p + 1);
    let (text, payload) = rest.split_at(split);
    let mut file = b"\x93NUMPY".to_vec();
    file.extend_from_slice(&[version, 0]);
    if version == 1 {
        let len = u16::try_from(text.len()).unwrap_or(u16::MAX);
        file.extend_from_slice(&len.to_le_bytes());
    } else {
        let len = u32::try_from(text.len()).unwrap_or(u32::MAX);
        file.extend_from_slice(&len.to_le_bytes());
    }
    file.extend_from_slice(text);
    file.extend_from_slice(payload);
    check_npy(&file);
}

fn check_npy(file: &[u8]) {
    match npy::from_bytes(file) {
        Ok(array) => {
            assert!(
                file.ends_with(array.tensor.bytes()),
                "the payload is the file's tail"
            );
            let image = npy::to_bytes(&array.tensor, &array.descr)
                .expect("an array read can be written with its own descr");
            let back = npy::from_bytes(&image).expect("a written array reads back");
            assert_eq!(back.tensor, array.tensor, "write then read is the identity");
            if array.tensor.dtype() == DType::String {
                // Byte order and width survive; the spelling is numpy's (`=U03` writes `<U3`).
                let layout = |d: &str| (d.starts_with('>'), d[2..].parse::<usize>().ok());
                assert_eq!(
                    layout(&back.descr),
                    layout(&array.descr),
                    "a unicode descr's layout survives a round trip"
                );
            } else {
                assert_eq!(back.descr, array.descr, "the descr survives a round trip");
            }
        }
        Err(e) => check_message(&e.to_string()),
    }
}
