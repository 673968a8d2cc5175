//! numpy's fixed-width unicode arrays (`<U{n}`, `>U{n}`): UTF-32 code units, NUL-padded.

use scatterjit::ir::Tensor;

use super::error::{KindResult, NpyErrorKind};

/// numpy's `U{width}`: `width` UTF-32 code units per element, NUL-padded at the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Unicode {
    pub(super) width: usize,
    pub(super) big_endian: bool,
}

/// The unicode layout of `descr` (`<U5`; `=` and `|` read as `<`, `>` is big-endian; no
/// digits is width 0), or `None` if it is not a unicode descr. A width beyond `usize`
/// saturates, so the payload size overflows and the shape is reported.
pub(super) fn unicode_descr(descr: &str) -> Option<Unicode> {
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
    pub(super) fn nbytes(self, shape: &[usize]) -> Option<usize> {
        let element = self.width.checked_mul(4)?;
        scatterjit::ir::checked_numel(shape)
            .ok()?
            .checked_mul(element)
            .filter(|&n| n <= isize::MAX as usize)
    }

    /// The string tensor of `shape` stored in `payload` (of exactly [`Unicode::nbytes`]).
    pub(super) fn decode(self, shape: &[usize], payload: &[u8]) -> KindResult<Tensor> {
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

    /// `strings` as `shape`'s payload in this byte order, and the layout written: this
    /// width when every string fits in it, else the longest string's (never less than 1),
    /// so no character is dropped.
    pub(super) fn encode(
        self,
        shape: &[usize],
        strings: &[String],
    ) -> KindResult<(Unicode, Vec<u8>)> {
        let width = strings
            .iter()
            .map(|s| s.chars().count())
            .fold(self.width.max(1), usize::max);
        let big_endian = self.big_endian;
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
    pub(super) fn descr(self) -> String {
        let order = if self.big_endian { '>' } else { '<' };
        format!("{order}U{}", self.width)
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::npy::test_support::*;
    use crate::npy::*;

    #[test]
    fn writes_what_numpy_writes() {
        // np.save of np.array(['ab', 'c']): '<U2', NUL-padded UTF-32LE.
        let a = u32::from('a');
        let expected = numpy_image("<U2", "(2,)", &utf32(&[a, a + 1, a + 2, 0], false));
        let ab_c = strings(&[2], &["ab", "c"]);
        // No width, the exact width, or one too narrow (widened rather than truncated).
        for descr in ["<U", "<U2", "<U1", "<U0"] {
            assert_eq!(to_bytes(&ab_c, descr).unwrap(), expected, "{descr}");
        }
        // A wider descr is kept, as np.save of the same array with dtype '<U4' writes it.
        let wide = numpy_image(
            "<U4",
            "(2,)",
            &utf32(&[a, a + 1, 0, 0, a + 2, 0, 0, 0], false),
        );
        assert_eq!(to_bytes(&ab_c, "<U4").unwrap(), wide);
        let wide_be = to_bytes(&ab_c, ">U4").unwrap();
        assert_eq!(from_bytes(&wide_be).unwrap().descr, ">U4");
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
        let t = from_bytes(&numpy_image("<U4", "(2,)", &payload))
            .unwrap()
            .tensor;
        assert_eq!(t.strings().unwrap(), ["a\0b", ""]);
    }

    #[test]
    fn big_endian_reads() {
        let payload = utf32(&[0x65e5, 0x1f980], true);
        let t = from_bytes(&numpy_image(">U1", "(2,)", &payload))
            .unwrap()
            .tensor;
        assert_eq!(t.strings().unwrap(), ["日", "🦀"]);
    }

    #[test]
    fn invalid_code_points_name_the_element() {
        for bad in [0xD800u32, 0x11_0000, u32::MAX] {
            let payload = utf32(&[0x61, 0, 0x62, bad], false);
            let k = from_bytes(&numpy_image("<U2", "(2,)", &payload))
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
        fs::write(&path, numpy_image("<U1", "(1,)", &utf32(&[0xDFFF], false))).unwrap();
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
        let k = from_bytes(&numpy_image("<U3", "(2,)", &[0; 23]))
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
            let k = from_bytes(&numpy_image(descr, shape, &[]))
                .unwrap_err()
                .into_kind();
            assert!(
                matches!(k, NpyErrorKind::ShapeOverflow { .. }),
                "{descr}: {k:?}"
            );
        }
        // numpy never writes a zero width; with it, no payload would bound the shape.
        let k = from_bytes(&numpy_image("<U0", "(1000000000000,)", &[]))
            .unwrap_err()
            .into_kind();
        assert!(matches!(k, NpyErrorKind::UnsupportedDType { .. }), "{k:?}");
        for descr in ["<Ux", "<U", "<U-1", "U5"] {
            let k = from_bytes(&numpy_image(descr, "(1,)", &[0; 4]))
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
