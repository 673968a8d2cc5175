//! The views callers build: [`TensorView`] (read-only) and [`TensorViewMut`] (writable),
//! and their copies back to owned tensors.

use std::ops::Range;

use scatterjit_ir::{checked_nbytes, checked_numel, DType, Error, Meta, Operand, Result, Tensor};

use super::layout::{row_major, Layout};
use super::raw::{Address, Place, RawOperand};
use super::relayout::{copy_row_major, is_transposed};
use super::walk::for_each_offset;

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
    /// Initialized, but in the views of [`Self::unwritten`], which only kernels write.
    bytes: Place<'a>,
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
        let layout = Layout::new(Operand::Data, dtype, shape, strides, offset, bytes.len())?;
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
        Self::new(dtype, shape, &row_major(shape), 0, bytes)
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
        let bytes = checked_nbytes(self.dtype(), &self.layout.shape)?;
        let mut out = Vec::new();
        out.try_reserve_exact(bytes)
            .map_err(|_| Error::OutOfMemory { bytes })?;
        out.resize(bytes, 0);
        self.copy_row_major(&mut out);
        Tensor::from_bytes(self.dtype(), self.layout.shape.to_vec(), out)
    }

    /// Whether the view is a transpose: laid out closer along some dim than along its last.
    pub(crate) fn is_transposed(&self) -> bool {
        is_transposed(&self.layout.shape, &self.layout.strides)
    }

    /// Writes the viewed elements into `to`, exactly their bytes, in row-major order
    /// (transposes in cache-sized tiles; split over the pool when large).
    pub(crate) fn copy_row_major(&self, to: &mut [u8]) {
        let layout = &self.layout;
        let size = self.dtype().size();
        copy_row_major(
            &layout.shape,
            &layout.strides,
            layout.offset,
            self.bytes,
            size,
            to,
        );
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

    /// The whole viewed buffer, position 0 at the layout's offset.
    pub(crate) fn buffer(&self) -> &'a [u8] {
        self.bytes
    }

    /// The element offset of position 0 in [`Self::buffer`].
    pub(crate) fn offset(&self) -> usize {
        self.layout.offset
    }

    pub(super) fn layout(&self) -> &Layout {
        &self.layout
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
        Self::over(Place::from(bytes), dtype, shape, strides, offset)
    }

    /// [`Self::new`] over a place: as initialized as it is.
    pub(crate) fn over(
        bytes: Place<'a>,
        dtype: DType,
        shape: &[usize],
        strides: &[isize],
        offset: usize,
    ) -> Result<Self> {
        let layout =
            Layout::new(Operand::Output, dtype, shape, strides, offset, bytes.len())?.writable()?;
        Ok(TensorViewMut {
            layout,
            bytes,
            strings: &mut [],
        })
    }

    /// A row-major view of a new output that nothing has written yet.
    ///
    /// # Safety
    /// As for [`Place::unwritten`]: the view goes only to calls whose kernels write every
    /// element before anything reads one (a Gather or GatherElements), and nothing calls
    /// [`Self::as_view`] or [`Self::dense_bytes_mut`] on it.
    pub(crate) unsafe fn unwritten(
        bytes: Place<'a>,
        dtype: DType,
        shape: &[usize],
    ) -> Result<Self> {
        let layout = Layout::contiguous(dtype, shape)
            .checked(Operand::Output, bytes.len())?
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
            // SAFETY: initialized: the public constructors take slices, and the views of
            // `Self::unwritten` are never asked for this (its contract).
            bytes: unsafe { self.bytes.bytes() },
            strings: self.strings,
        }
    }

    /// The elements as one row-major byte slice, if the view is laid out that way.
    pub(crate) fn dense_bytes_mut(&mut self) -> Option<&mut [u8]> {
        let range = self.layout.dense_range()?;
        // SAFETY: initialized, as in `as_view`.
        Some(&mut unsafe { self.bytes.bytes_mut() }[range])
    }

    /// The elements as one row-major place, if the view is laid out that way: what
    /// [`Self::dense_bytes_mut`] is, for writers that may meet an unwritten output.
    pub(crate) fn dense_place(&mut self) -> Option<Place<'_>> {
        let range = self.layout.dense_range()?;
        self.bytes.reborrow().slice(range)
    }

    /// The addresses of the viewed buffer.
    pub(crate) fn span(&self) -> Range<*const u8> {
        self.bytes.span()
    }

    /// The whole viewed buffer, position 0 at the layout's offset. Writable views never
    /// put two positions on one element, whatever is written through this.
    pub(crate) fn buffer_mut(&mut self) -> Place<'_> {
        self.bytes.reborrow()
    }

    /// The element offset of position 0 in [`Self::buffer_mut`].
    pub(crate) fn offset(&self) -> usize {
        self.layout.offset
    }

    pub(super) fn layout(&self) -> &Layout {
        &self.layout
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
                bytes: Place::from(&mut [][..]),
                strings: t.strings_mut().unwrap_or_default(),
            };
        }
        TensorViewMut {
            layout,
            bytes: Place::from(t.bytes_mut()),
            strings: &mut [],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
