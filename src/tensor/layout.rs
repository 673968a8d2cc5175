//! The geometry of a view (dtype, shape, element strides, offset) and its checks: every
//! position inside the buffer, and for writable views no two positions on one element.

use scatterjit_ir::{
    checked_numel, fill_row_major_strides, row_major_strides, DType, Error, Operand, Result,
    MAX_RANK,
};
use smallvec::SmallVec;

/// Dims or strides, inline up to a kernel's rank: views are made on every call, and
/// most calls make several.
pub(crate) type Dims<T> = SmallVec<[T; MAX_RANK]>;

/// The geometry shared by both view kinds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Layout {
    pub(super) dtype: DType,
    pub(super) shape: Dims<usize>,
    pub(super) strides: Dims<isize>,
    /// Element offset of position 0 from the start of the slice.
    pub(super) offset: usize,
}

impl Layout {
    /// The byte range of the elements when they are row-major and gap-free (dims of size
    /// 1 may have any stride); `None` otherwise.
    pub(super) fn dense_range(&self) -> Option<std::ops::Range<usize>> {
        if !is_dense(&self.shape, &self.strides) {
            return None;
        }
        let numel = checked_numel(&self.shape).ok()?;
        let size = self.dtype.size();
        // Validated at construction: every position lies inside the slice.
        let start = self.offset * size;
        Some(start..start + numel * size)
    }

    pub(super) fn new(
        tensor: Operand,
        dtype: DType,
        shape: &[usize],
        strides: &[isize],
        offset: usize,
        len: usize,
    ) -> Result<Layout> {
        if strides.len() != shape.len() {
            return Err(Error::InvalidView {
                tensor,
                reason: format!("{} strides for {} dims", strides.len(), shape.len()),
            });
        }
        Layout {
            dtype,
            shape: Dims::from_slice(shape),
            strides: Dims::from_slice(strides),
            offset,
        }
        .checked(tensor, len)
    }

    /// `self` if every position lies inside `len` bytes, with the strides and offset of a
    /// view without elements stored as 0.
    pub(super) fn checked(mut self, tensor: Operand, len: usize) -> Result<Layout> {
        let invalid = |reason: String| Error::InvalidView { tensor, reason };
        let (dtype, shape, strides, offset) = (self.dtype, &self.shape, &self.strides, self.offset);
        if dtype == DType::String {
            return Err(invalid("string tensors are not stored as bytes".into()));
        }
        // Row-major without gaps reaches `offset..offset + numel` and nothing else: one
        // comparison, where the general bounds below cost near the work of a tiny call.
        // Views that fail it take the general path, for its message.
        if let Some(numel) = dense_numel(shape, strides).filter(|&n| n > 0) {
            let needed = offset
                .checked_add(numel)
                .and_then(|n| n.checked_mul(dtype.size()));
            if needed.is_some_and(|n| n <= len) {
                return Ok(self);
            }
        }
        let numel = checked_numel(shape)?;
        let size = dtype.size() as i128;
        if numel > 0 {
            // Lowest and highest element offsets any position reaches, checked: a huge dim
            // times a huge stride must be an error, not a wrap-around.
            let (mut lo, mut hi) = (Some(offset as i128), Some(offset as i128));
            for (&d, &s) in shape.iter().zip(strides) {
                let reach = (d as i128 - 1).checked_mul(s as i128);
                match reach {
                    Some(r) if r < 0 => lo = lo.and_then(|l| l.checked_add(r)),
                    Some(r) => hi = hi.and_then(|h| h.checked_add(r)),
                    None => (lo, hi) = (None, None),
                }
            }
            let (Some(lo), Some(hi)) = (lo, hi) else {
                return Err(invalid(format!(
                    "strides {strides:?} over shape {shape:?} reach beyond any buffer"
                )));
            };
            if lo < 0 {
                return Err(invalid(format!(
                    "strides {strides:?} from offset {offset} reach element {lo}, before the buffer"
                )));
            }
            let needed = hi.checked_add(1).and_then(|n| n.checked_mul(size));
            if needed.is_none_or(|n| n > len as i128) {
                let needed = needed.map_or_else(|| "over 2^127".to_string(), |n| n.to_string());
                return Err(invalid(format!(
                    "shape {shape:?} with strides {strides:?} and offset {offset} needs {needed} bytes, the buffer has {len}"
                )));
            }
        } else {
            // A view without elements addresses nothing, so any strides and offset are
            // accepted; they are stored as 0 so that no address, byte range or step
            // computed from them overflows (the other operands of a call need not be
            // empty).
            self.strides.fill(0);
            self.offset = 0;
        }
        Ok(self)
    }

    /// See [`TensorView::compacted`](super::TensorView::compacted).
    pub(super) fn compacted(&self) -> (Layout, Vec<usize>) {
        let shape = &self.shape;
        let kept: Vec<usize> = if shape.contains(&0) {
            (0..shape.len()).collect()
        } else {
            (0..shape.len())
                .filter(|&d| shape[d] > 1 && self.strides[d] != 0)
                .collect()
        };
        let layout = Layout {
            dtype: self.dtype,
            shape: kept.iter().map(|&d| shape[d]).collect(),
            strides: kept.iter().map(|&d| self.strides[d]).collect(),
            offset: self.offset,
        };
        (layout, kept)
    }

    /// `self` if no two positions share an element, as a writable view needs.
    pub(super) fn writable(self) -> Result<Layout> {
        // Row-major without gaps cannot overlap; the general test sorts the dims.
        if !is_dense(&self.shape, &self.strides) && !self.is_non_overlapping() {
            let (shape, strides) = (&self.shape, &self.strides);
            return Err(Error::InvalidView {
                tensor: Operand::Output,
                reason: format!("shape {shape:?} with strides {strides:?} makes elements overlap"),
            });
        }
        Ok(self)
    }

    /// The fewest bytes a buffer needs to hold every position (0 without elements).
    pub(super) fn needed(&self) -> usize {
        if self.shape.contains(&0) {
            return 0;
        }
        let reach: isize = self
            .shape
            .iter()
            .zip(&self.strides)
            .map(|(&d, &s)| (d as isize - 1) * s.max(0))
            .sum();
        // Checked at construction against a buffer of `isize::MAX` bytes.
        (self.offset + reach as usize + 1) * self.dtype.size()
    }

    pub(super) fn contiguous(dtype: DType, shape: &[usize]) -> Layout {
        Layout {
            dtype,
            shape: Dims::from_slice(shape),
            strides: row_major(shape),
            offset: 0,
        }
    }

    /// True if no two positions share an element (checked by a sufficient condition: each
    /// dim's stride, by increasing magnitude, steps over everything the smaller ones reach).
    fn is_non_overlapping(&self) -> bool {
        let mut dims: Dims<(usize, usize)> = self
            .shape
            .iter()
            .zip(&self.strides)
            .filter(|(&d, _)| d > 1)
            .map(|(&d, &s)| (s.unsigned_abs(), d))
            .collect();
        if self.shape.contains(&0) {
            return true;
        }
        dims.sort_unstable();
        let mut reach = 0usize; // highest element offset the smaller dims reach
        for (stride, d) in dims {
            if stride <= reach || stride == 0 {
                return false;
            }
            reach = match (d - 1)
                .checked_mul(stride)
                .and_then(|r| r.checked_add(reach))
            {
                Some(r) => r,
                None => return false,
            };
        }
        true
    }
}

/// Whether element `strides` lay `shape` out row-major without gaps (dims of size 1 may
/// have any stride).
pub(crate) fn is_dense(shape: &[usize], strides: &[isize]) -> bool {
    dense_numel(shape, strides).is_some()
}

/// The number of elements of `shape` if `strides` lay it out as [`is_dense`] says (their
/// count then fits an `isize`); `None` otherwise.
fn dense_numel(shape: &[usize], strides: &[isize]) -> Option<usize> {
    let mut expected = 1isize;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d > 1 && s != expected {
            return None;
        }
        expected = expected.checked_mul(isize::try_from(d).ok()?)?;
    }
    Some(expected as usize)
}

/// Row-major element strides of `shape`, inline up to [`MAX_RANK`] dims.
pub(crate) fn row_major(shape: &[usize]) -> Dims<isize> {
    let rank = shape.len();
    if rank > MAX_RANK {
        return row_major_strides(shape)
            .iter()
            .map(|&s| s as isize)
            .collect();
    }
    let mut unsigned = [0usize; MAX_RANK];
    fill_row_major_strides(shape, &mut unsigned[..rank]);
    unsigned[..rank].iter().map(|&s| s as isize).collect()
}

#[cfg(test)]
mod tests {
    use scatterjit_ir::DType;

    use crate::tensor::{TensorView, TensorViewMut};

    #[test]
    fn views_must_fit_their_buffer() {
        let bytes = [0u8; 24];
        assert!(TensorView::new(DType::F32, &[2, 3], &[3, 1], 0, &bytes).is_ok());
        assert!(TensorView::new(DType::F32, &[2, 3], &[3, 1], 1, &bytes).is_err());
        assert!(TensorView::new(DType::F32, &[2, 3], &[-3, 1], 3, &bytes).is_ok());
        assert!(TensorView::new(DType::F32, &[2, 3], &[-3, 1], 2, &bytes).is_err());
        assert!(TensorView::new(DType::F32, &[0, 100], &[100, 1], 0, &bytes).is_ok());
        assert!(TensorView::new(DType::F32, &[2], &[1, 1], 0, &bytes).is_err());
    }

    /// Row-major views take a shortcut past the general bounds and overlap checks; it must
    /// accept and refuse exactly what they do, with their message.
    #[test]
    fn dense_views_fit_exactly_where_the_general_check_says() {
        // (shape, strides): row-major, with dims of size 1 at odd strides (which reach
        // nothing), a scalar, and an empty shape.
        let cases: &[(&[usize], &[isize])] = &[
            (&[], &[]),
            (&[5], &[1]),
            (&[2, 3], &[3, 1]),
            (&[2, 1, 3], &[3, -7, 1]),
            (&[1, 4], &[0, 1]),
            (&[3, 1], &[1, 1_000_000]),
            (&[0, 3], &[3, 1]),
        ];
        for &(shape, strides) in cases {
            let numel: usize = shape.iter().product();
            for offset in 0..3 {
                let needed = if numel == 0 { 0 } else { (offset + numel) * 4 };
                for len in needed.saturating_sub(5)..needed + 5 {
                    let bytes = vec![0u8; len];
                    let view = TensorView::new(DType::F32, shape, strides, offset, &bytes);
                    let context = format!("{shape:?} {strides:?} offset {offset} len {len}");
                    match view {
                        Ok(v) if numel == 0 => assert!(v.strides().iter().all(|&s| s == 0)),
                        Ok(v) => {
                            assert!(len >= needed, "{context}");
                            assert_eq!(v.strides(), strides, "{context}");
                        }
                        Err(e) => {
                            assert!(len < needed, "{context}: {e}");
                            assert!(e.to_string().contains(&format!("needs {needed} bytes")));
                        }
                    }
                    let mut bytes = bytes;
                    let writable =
                        TensorViewMut::new(DType::F32, shape, strides, offset, &mut bytes);
                    assert_eq!(writable.is_ok(), len >= needed, "{context}");
                }
            }
        }
    }

    #[test]
    fn writable_views_must_not_overlap() {
        let mut bytes = [0u8; 24];
        assert!(TensorViewMut::new(DType::F32, &[2, 3], &[1, 1], 0, &mut bytes).is_err());
        assert!(TensorViewMut::new(DType::F32, &[2, 3], &[1, 2], 0, &mut bytes).is_ok());
        assert!(TensorViewMut::new(DType::F32, &[3, 2], &[1, 3], 0, &mut bytes).is_ok());
        assert!(TensorViewMut::new(DType::F32, &[2, 3], &[0, 1], 0, &mut bytes).is_err());
        assert!(TensorViewMut::new(DType::F32, &[1, 3], &[0, 1], 0, &mut bytes).is_ok());
    }
}
