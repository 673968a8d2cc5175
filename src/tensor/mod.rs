//! Strided views over caller memory: what kernels read and write without copying.
//!
//! A view is a byte slice plus dtype, shape, element strides (may be zero or negative) and
//! the element offset of position 0. Constructors prove that every addressed element lies
//! inside the slice, so a kernel given a view never touches memory outside it.

use std::ops::Range;

use scatterjit_ir::{
    checked_nbytes, checked_numel, row_major_strides, DType, Error, Meta, Result, Tensor,
    TensorRole,
};

/// The geometry shared by both view kinds.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Layout {
    dtype: DType,
    shape: Vec<usize>,
    strides: Vec<isize>,
    /// Element offset of position 0 from the start of the slice.
    offset: usize,
}

impl Layout {
    /// The byte range of the elements when they are row-major and gap-free (dims of size
    /// 1 may have any stride); `None` otherwise.
    fn dense_range(&self) -> Option<std::ops::Range<usize>> {
        if !is_dense(&self.shape, &self.strides) {
            return None;
        }
        let numel = checked_numel(&self.shape).ok()?;
        let size = self.dtype.size();
        // Validated at construction: every position lies inside the slice.
        let start = self.offset * size;
        Some(start..start + numel * size)
    }

    fn new(
        tensor: TensorRole,
        dtype: DType,
        shape: &[usize],
        strides: &[isize],
        offset: usize,
        len: usize,
    ) -> Result<Layout> {
        let invalid = |reason: String| Error::InvalidView { tensor, reason };
        if dtype == DType::String {
            return Err(invalid("string tensors are not stored as bytes".into()));
        }
        if strides.len() != shape.len() {
            return Err(invalid(format!(
                "{} strides for {} dims",
                strides.len(),
                shape.len()
            )));
        }
        checked_numel(shape)?;
        let size = dtype.size() as i128;
        if shape.iter().all(|&d| d > 0) {
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
        }
        // A view without elements addresses nothing, so any strides and offset are
        // accepted; they are stored as 0 so that no address, byte range or step computed
        // from them overflows (the other operands of a call need not be empty).
        let empty = shape.contains(&0);
        Ok(Layout {
            dtype,
            shape: shape.to_vec(),
            strides: if empty {
                vec![0; shape.len()]
            } else {
                strides.to_vec()
            },
            offset: if empty { 0 } else { offset },
        })
    }

    /// See [`TensorView::compacted`].
    fn compacted(&self) -> (Layout, Vec<usize>) {
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
    fn writable(self) -> Result<Layout> {
        if !self.is_non_overlapping() {
            let (shape, strides) = (&self.shape, &self.strides);
            return Err(Error::InvalidView {
                tensor: TensorRole::Output,
                reason: format!("shape {shape:?} with strides {strides:?} makes elements overlap"),
            });
        }
        Ok(self)
    }

    /// The fewest bytes a buffer needs to hold every position (0 without elements).
    fn needed(&self) -> usize {
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

    fn contiguous(dtype: DType, shape: &[usize]) -> Layout {
        Layout {
            dtype,
            shape: shape.to_vec(),
            // `into_iter` reuses the allocation.
            strides: row_major_strides(shape)
                .into_iter()
                .map(|s| s as isize)
                .collect(),
            offset: 0,
        }
    }

    /// True if no two positions share an element (checked by a sufficient condition: each
    /// dim's stride, by increasing magnitude, steps over everything the smaller ones reach).
    fn is_non_overlapping(&self) -> bool {
        let mut dims: Vec<(usize, usize)> = self
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

/// A read-only strided view of elements in a byte slice.
///
/// String tensors have no bytes: a view of one (`TensorView::from(&tensor)`) can be copied
/// back with [`TensorView::to_tensor`], and every kernel refuses it.
#[derive(Clone, Debug)]
pub struct TensorView<'a> {
    layout: Layout,
    bytes: &'a [u8],
    /// The elements of a string tensor's view; empty for other dtypes.
    strings: &'a [String],
}

/// A writable strided view; its elements never overlap, so each write lands once.
///
/// An output never aliases an input of the same call: it borrows its bytes mutably, so the
/// borrow checker refuses any other view of them while it lives. With separate buffers:
///
/// ```
/// use scatterjit::{DType, KernelCache, KernelKey, TensorView, TensorViewMut};
/// let cache = KernelCache::new();
/// let key = KernelKey::gather_elements(DType::U8, DType::U8, 1, 0)?;
/// let (data, indices, mut out) = ([7u8, 8, 9], [2u8, 0], [0u8; 2]);
/// let dv = TensorView::new(DType::U8, &[3], &[1], 0, &data)?;
/// let iv = TensorView::new(DType::U8, &[2], &[1], 0, &indices)?;
/// let mut ov = TensorViewMut::new(DType::U8, &[2], &[1], 0, &mut out)?;
/// cache.get(&key)?.run_into(&mut ov, &dv, &iv, None)?;
/// assert_eq!(out, [9, 7]);
/// # Ok::<(), scatterjit::Error>(())
/// ```
///
/// The same call with the output over data's bytes does not compile:
///
/// ```compile_fail
/// use scatterjit::{DType, KernelCache, KernelKey, TensorView, TensorViewMut};
/// let cache = KernelCache::new();
/// let key = KernelKey::gather_elements(DType::U8, DType::U8, 1, 0)?;
/// let (mut data, indices) = ([7u8, 8, 9], [2u8, 0]);
/// let dv = TensorView::new(DType::U8, &[3], &[1], 0, &data)?;
/// let iv = TensorView::new(DType::U8, &[2], &[1], 0, &indices)?;
/// let mut ov = TensorViewMut::new(DType::U8, &[2], &[1], 0, &mut data)?;
/// cache.get(&key)?.run_into(&mut ov, &dv, &iv, None)?;
/// # Ok::<(), scatterjit::Error>(())
/// ```
///
/// Nor does an in-place scatter whose updates view the data being updated:
///
/// ```compile_fail
/// use scatterjit::{DType, KernelCache, KernelKey, Reduction, TensorView, TensorViewMut};
/// let cache = KernelCache::new();
/// let key = KernelKey::scatter_elements(DType::U8, DType::U8, 1, 0, Reduction::Add, true)?;
/// let (mut data, indices) = ([7u8, 8, 9], [2u8, 0, 1]);
/// let iv = TensorView::new(DType::U8, &[3], &[1], 0, &indices)?;
/// let mut dv = TensorViewMut::new(DType::U8, &[3], &[1], 0, &mut data)?;
/// let updates = dv.as_view();
/// cache.get(&key)?.scatter_in_place(&mut dv, &iv, &updates)?;
/// # Ok::<(), scatterjit::Error>(())
/// ```
///
/// Views built from raw buffers that overlap anyway are refused at run time
/// (`ir::Error::Overlap`).
#[derive(Debug)]
pub struct TensorViewMut<'a> {
    layout: Layout,
    bytes: &'a mut [u8],
    /// The elements of a string tensor's view; empty for other dtypes.
    strings: &'a mut [String],
}

impl<'a> TensorView<'a> {
    /// A view of `bytes` with element `strides` (zero and negative allowed) and the element
    /// `offset` of position 0. Fails unless every position lies inside `bytes`. A view with
    /// no elements (a zero dim) accepts any strides and offset, and keeps them as zeros.
    ///
    /// A scalar broadcast to a shape (PyTorch's `scatter_(dim, index, value)`) is a view
    /// with all strides zero:
    /// ```
    /// use scatterjit::{DType, TensorView};
    /// let one = 1.5f32.to_le_bytes();
    /// let v = TensorView::new(DType::F32, &[2, 3], &[0, 0], 0, &one).unwrap();
    /// assert_eq!(v.shape(), [2, 3]);
    /// ```
    pub fn new(
        dtype: DType,
        shape: &[usize],
        strides: &[isize],
        offset: usize,
        bytes: &'a [u8],
    ) -> Result<Self> {
        let layout = Layout::new(TensorRole::Data, dtype, shape, strides, offset, bytes.len())?;
        Ok(TensorView {
            layout,
            bytes,
            strings: &[],
        })
    }

    /// A row-major view of exactly `numel * size` bytes.
    pub fn contiguous(dtype: DType, shape: &[usize], bytes: &'a [u8]) -> Result<Self> {
        let needed = scatterjit_ir::checked_nbytes(dtype, shape)?;
        if needed != bytes.len() {
            return Err(Error::BufferSize {
                expected: needed,
                actual: bytes.len(),
            });
        }
        let strides: Vec<isize> = row_major_strides(shape)
            .iter()
            .map(|&s| s as isize)
            .collect();
        Self::new(dtype, shape, &strides, 0, bytes)
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.layout.dtype
    }
    /// Dimensions.
    pub fn shape(&self) -> &[usize] {
        &self.layout.shape
    }
    /// Element strides.
    pub fn strides(&self) -> &[isize] {
        &self.layout.strides
    }
    /// The dtype and shape, for validation.
    pub fn meta(&self) -> Meta<'_> {
        Meta::new(self.layout.dtype, &self.layout.shape)
    }

    /// Copies the viewed elements into a new contiguous tensor. A broadcast view (stride 0)
    /// may view far more elements than its buffer holds: a copy whose bytes overflow is
    /// [`Error::ShapeOverflow`], one the allocator refuses [`Error::OutOfMemory`].
    pub fn to_tensor(&self) -> Result<Tensor> {
        if self.dtype() == DType::String {
            let n = self.numel();
            let mut out = Vec::new();
            out.try_reserve_exact(n).map_err(|_| Error::OutOfMemory {
                bytes: n.saturating_mul(std::mem::size_of::<String>()),
            })?;
            for_each_offset(&self.layout.shape, &self.layout.strides, |off| {
                out.push(self.strings[(self.layout.offset as isize + off) as usize].clone());
            });
            return Tensor::from_strings(&self.layout.shape, out);
        }
        let size = self.dtype().size();
        let bytes = checked_nbytes(self.dtype(), &self.layout.shape)?;
        let mut out = Vec::new();
        out.try_reserve_exact(bytes)
            .map_err(|_| Error::OutOfMemory { bytes })?;
        for_each_offset(&self.layout.shape, &self.layout.strides, |off| {
            let at = (self.layout.offset as isize + off) as usize * size;
            out.extend_from_slice(&self.bytes[at..at + size]);
        });
        Tensor::from_bytes(self.dtype(), self.layout.shape.clone(), out)
    }

    /// The bytes of the element at element `offset` from position 0 (a position's offset).
    pub(crate) fn element_bytes(&self, offset: isize) -> &[u8] {
        let size = self.dtype().size();
        let at = (self.layout.offset as isize + offset) as usize * size;
        &self.bytes[at..at + size]
    }

    fn numel(&self) -> usize {
        // A shape with a zero dim has no elements however large the others (no overflow).
        checked_numel(&self.layout.shape).expect("counted when the view was made")
    }

    /// The elements as one row-major byte slice, if the view is laid out that way.
    pub(crate) fn dense_bytes(&self) -> Option<&[u8]> {
        let range = self.layout.dense_range()?;
        Some(&self.bytes[range])
    }

    /// The addresses of the viewed buffer.
    pub(crate) fn span(&self) -> Range<*const u8> {
        self.bytes.as_ptr_range()
    }

    /// The view without its broadcast dims (stride 0) and dims of size 1, which repeat
    /// elements, and the dims it keeps: the distinct positions, in row-major order of
    /// their first occurrence. A view with a zero dim is returned whole.
    pub(crate) fn compacted(&self) -> (TensorView<'a>, Vec<usize>) {
        let (layout, kept) = self.layout.compacted();
        let view = TensorView {
            layout,
            bytes: self.bytes,
            strings: self.strings,
        };
        (view, kept)
    }

    /// The view with stride 0 on every dim but `axis`: each element repeats the one at
    /// its axis coordinate and 0 elsewhere, a position of this view.
    pub(crate) fn broadcast_off(&self, axis: usize) -> TensorView<'a> {
        let mut layout = self.layout.clone();
        for (d, stride) in layout.strides.iter_mut().enumerate() {
            if d != axis {
                *stride = 0;
            }
        }
        TensorView {
            layout,
            bytes: self.bytes,
            strings: self.strings,
        }
    }

    /// Address of position 0 (for kernels, which only reach validated positions).
    pub(crate) fn raw(&self) -> RawOperand<'_> {
        RawOperand {
            address: Address::Read(
                self.bytes
                    .as_ptr()
                    .wrapping_add(self.layout.offset * self.dtype().size()),
            ),
            shape: &self.layout.shape,
            strides: &self.layout.strides,
        }
    }
}

impl<'a> From<&'a Tensor> for TensorView<'a> {
    fn from(t: &'a Tensor) -> Self {
        TensorView {
            layout: Layout::contiguous(t.dtype(), t.shape()),
            bytes: t.bytes(),
            // Asked only of string tensors: for others the error would be formatted.
            strings: match t.dtype() {
                DType::String => t.strings().unwrap_or_default(),
                _ => &[],
            },
        }
    }
}

impl<'a> TensorViewMut<'a> {
    /// A writable view; like [`TensorView::new`], and also fails if two positions would
    /// share an element.
    pub fn new(
        dtype: DType,
        shape: &[usize],
        strides: &[isize],
        offset: usize,
        bytes: &'a mut [u8],
    ) -> Result<Self> {
        let layout = Layout::new(
            TensorRole::Output,
            dtype,
            shape,
            strides,
            offset,
            bytes.len(),
        )?
        .writable()?;
        Ok(TensorViewMut {
            layout,
            bytes,
            strings: &mut [],
        })
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.layout.dtype
    }
    /// Dimensions.
    pub fn shape(&self) -> &[usize] {
        &self.layout.shape
    }
    /// Element strides.
    pub fn strides(&self) -> &[isize] {
        &self.layout.strides
    }
    /// The dtype and shape, for validation.
    pub fn meta(&self) -> Meta<'_> {
        Meta::new(self.layout.dtype, &self.layout.shape)
    }
    /// A read-only view of the same elements.
    pub fn as_view(&self) -> TensorView<'_> {
        TensorView {
            layout: self.layout.clone(),
            bytes: self.bytes,
            strings: self.strings,
        }
    }

    /// The elements as one row-major byte slice, if the view is laid out that way.
    pub(crate) fn dense_bytes_mut(&mut self) -> Option<&mut [u8]> {
        let range = self.layout.dense_range()?;
        Some(&mut self.bytes[range])
    }

    /// The addresses of the viewed buffer.
    pub(crate) fn span(&self) -> Range<*const u8> {
        self.bytes.as_ptr_range()
    }

    /// Address of position 0 (for kernels, which only reach validated positions).
    pub(crate) fn raw(&mut self) -> RawOperand<'_> {
        RawOperand {
            address: Address::Write(
                self.bytes
                    .as_mut_ptr()
                    .wrapping_add(self.layout.offset * self.dtype().size()),
            ),
            shape: &self.layout.shape,
            strides: &self.layout.strides,
        }
    }
}

impl<'a> From<&'a mut Tensor> for TensorViewMut<'a> {
    fn from(t: &'a mut Tensor) -> Self {
        let layout = Layout::contiguous(t.dtype(), t.shape());
        if t.dtype() == DType::String {
            return TensorViewMut {
                layout,
                bytes: &mut [],
                strings: t.strings_mut().unwrap_or_default(),
            };
        }
        TensorViewMut {
            layout,
            bytes: t.bytes_mut(),
            strings: &mut [],
        }
    }
}

/// The geometry of a view checked before its buffer exists, as [`TensorView::new`] (or
/// [`TensorViewMut::new`], when `writable`) checks it, with the fewest bytes its buffer
/// must have: all a call then checks of a buffer is its length.
#[derive(Clone, Debug)]
pub(crate) struct Unbuffered {
    layout: Layout,
    /// A buffer of at least this many bytes holds every position.
    pub(crate) needed: usize,
}

impl Unbuffered {
    pub(crate) fn new(
        dtype: DType,
        shape: &[usize],
        strides: &[isize],
        offset: usize,
        writable: bool,
    ) -> Result<Unbuffered> {
        // The roles the views name in their errors; no buffer is larger than isize::MAX.
        let tensor = if writable {
            TensorRole::Output
        } else {
            TensorRole::Data
        };
        let any = isize::MAX as usize;
        let mut layout = Layout::new(tensor, dtype, shape, strides, offset, any)?;
        if writable {
            layout = layout.writable()?;
        }
        let needed = layout.needed();
        Ok(Unbuffered { layout, needed })
    }

    pub(crate) fn shape(&self) -> &[usize] {
        &self.layout.shape
    }

    /// Byte offset of position 0 from the buffer's start.
    pub(crate) fn start(&self) -> usize {
        self.layout.offset * self.layout.dtype.size()
    }

    /// The byte range of the elements when they are row-major (see [`Layout`]).
    pub(crate) fn dense_range(&self) -> Option<Range<usize>> {
        self.layout.dense_range()
    }

    /// The byte range of the distinct elements when they are row-major once broadcast
    /// dims are dropped (see [`TensorView::compacted`]).
    pub(crate) fn compacted_dense_range(&self) -> Option<Range<usize>> {
        self.layout.compacted().0.dense_range()
    }

    /// Shape and strides for binding; the address is a placeholder that no call uses.
    pub(crate) fn raw(&self) -> RawOperand<'_> {
        RawOperand {
            address: Address::Read(std::ptr::null()),
            shape: &self.layout.shape,
            strides: &self.layout.strides,
        }
    }

    /// The view of `bytes` with this geometry (an error if `bytes` is too short).
    pub(crate) fn view<'a>(&self, bytes: &'a [u8]) -> Result<TensorView<'a>> {
        let l = &self.layout;
        TensorView::new(l.dtype, &l.shape, &l.strides, l.offset, bytes)
    }

    /// The writable view of `bytes` with this geometry.
    pub(crate) fn view_mut<'a>(&self, bytes: &'a mut [u8]) -> Result<TensorViewMut<'a>> {
        let l = &self.layout;
        TensorViewMut::new(l.dtype, &l.shape, &l.strides, l.offset, bytes)
    }
}

/// The address of an operand's position 0, and whether a pass may store through it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Address {
    /// An input, from a shared borrow: passes only load through it.
    Read(*const u8),
    /// An output or a call's scratch, from an exclusive borrow: passes store through it.
    Write(*mut u8),
}

/// What a kernel call needs of one operand: address of position 0, shape, element strides.
/// Only views build these, so every position of `shape` is inside the viewed memory.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawOperand<'a> {
    pub address: Address,
    pub shape: &'a [usize],
    pub strides: &'a [isize],
}

/// Whether element `strides` lay `shape` out row-major without gaps (dims of size 1 may
/// have any stride).
pub(crate) fn is_dense(shape: &[usize], strides: &[isize]) -> bool {
    let mut expected = 1isize;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d > 1 && s != expected {
            return false;
        }
        match expected.checked_mul(d as isize) {
            Some(e) => expected = e,
            None => return false,
        }
    }
    true
}

/// True if two address ranges share a byte (empty ranges share none).
pub(crate) fn overlaps(a: Range<*const u8>, b: Range<*const u8>) -> bool {
    !a.is_empty() && !b.is_empty() && a.start < b.end && b.start < a.end
}

/// Calls `f` with the element offset of every position of `shape`, in row-major order.
pub(crate) fn for_each_offset(shape: &[usize], strides: &[isize], mut f: impl FnMut(isize)) {
    if shape.contains(&0) {
        return;
    }
    let mut pos = vec![0usize; shape.len()];
    let mut off = 0isize;
    // Wrapping steps: a dim's last step may leave the range (a size-1 dim may have any
    // stride) before it is undone, but every offset passed to `f` is exact.
    loop {
        f(off);
        let mut d = shape.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            pos[d] += 1;
            off = off.wrapping_add(strides[d]);
            if pos[d] < shape[d] {
                break;
            }
            off = off.wrapping_sub(strides[d].wrapping_mul(shape[d] as isize));
            pos[d] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn empty_views_may_start_anywhere() {
        // Found by fuzzing: the offset of an empty view sliced past the buffer, and its
        // strides overflowed when a call split a non-empty output.
        let bytes = [0u8; 8];
        for (offset, strides) in [(6, [5, 1]), (usize::MAX, [isize::MIN, isize::MAX])] {
            let v = TensorView::new(DType::F32, &[0, 3], &strides, offset, &bytes).unwrap();
            assert_eq!(v.strides(), [0, 0]);
            assert!(v.dense_bytes().is_none_or(|b| b.is_empty()));
            assert_eq!(v.to_tensor().unwrap().shape(), [0, 3]);
            assert!(matches!(v.raw().address, Address::Read(p) if std::ptr::eq(p, bytes.as_ptr())));
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

    #[test]
    fn overlapping_spans() {
        let bytes = [0u8; 16];
        let span = |r: Range<usize>| bytes[r].as_ptr_range();
        assert!(overlaps(span(0..8), span(4..12)));
        assert!(overlaps(span(4..12), span(0..8)));
        assert!(overlaps(span(0..16), span(7..8)));
        assert!(!overlaps(span(0..8), span(8..16)));
        assert!(!overlaps(span(8..16), span(0..8)));
        assert!(!overlaps(span(4..4), span(0..8)));
        assert!(!overlaps(span(0..8), span(4..4)));
    }

    #[test]
    fn views_of_string_tensors_copy_back() {
        let mut t = Tensor::from_strings(&[2, 2], ["a", "", "ß", "🦀"]).unwrap();
        assert_eq!(TensorView::from(&t).to_tensor().unwrap(), t);
        let copy = t.clone();
        assert_eq!(
            TensorViewMut::from(&mut t).as_view().to_tensor().unwrap(),
            copy
        );
    }

    #[test]
    fn offsets_are_row_major() {
        let mut seen = Vec::new();
        for_each_offset(&[2, 2], &[1, 10], |o| seen.push(o));
        assert_eq!(seen, [0, 10, 1, 11]);
        let mut n = 0;
        for_each_offset(&[], &[], |_| n += 1);
        assert_eq!(n, 1);
        // Found by fuzzing: a size-1 dim's stride, stepped past and back, overflowed.
        let mut seen = Vec::new();
        for_each_offset(&[2, 1], &[1, isize::MAX], |o| seen.push(o));
        assert_eq!(seen, [0, 1]);
    }

    #[test]
    fn huge_empty_views_count_no_elements() {
        // Found by fuzzing: counting [2^63, 4, 0] overflowed before reaching the zero.
        let shape = [1usize << 63, 4, 0];
        for strides in [[0, 0, 0], [4, 1, 1]] {
            let v = TensorView::new(DType::F32, &shape, &strides, 0, &[]).unwrap();
            assert_eq!(v.to_tensor().unwrap().shape(), shape);
            assert!(v.dense_bytes().is_none_or(|b| b.is_empty()));
        }
    }

    #[test]
    fn copies_of_huge_broadcast_views_are_errors() {
        // One element viewed 2^62 times: 2^64 bytes of f32 overflow.
        let bytes = [0u8; 4];
        let v = TensorView::new(DType::F32, &[1 << 62], &[0], 0, &bytes).unwrap();
        let e = v.to_tensor().unwrap_err();
        assert_eq!(
            e,
            Error::ShapeOverflow {
                shape: vec![1 << 62]
            }
        );
        // 2^60 bytes fit in an isize, and in no address space.
        #[cfg(not(miri))]
        {
            let v = TensorView::new(DType::U8, &[1 << 30, 1 << 30], &[0, 0], 0, &bytes).unwrap();
            assert_eq!(
                v.to_tensor().unwrap_err(),
                Error::OutOfMemory { bytes: 1 << 60 }
            );
        }
    }
}
