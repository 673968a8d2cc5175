//! A view's geometry checked before its buffer exists (prepared calls).

use std::ops::Range;

use scatterjit_ir::{DType, Operand, Result};

use super::layout::Layout;
use super::raw::{Address, RawOperand};
use super::view::{TensorView, TensorViewMut};

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
            Operand::Output
        } else {
            Operand::Data
        };
        let any = isize::MAX as usize;
        let mut layout = Layout::new(tensor, dtype, shape, strides, offset, any)?;
        if writable {
            layout = layout.writable()?;
        }
        let needed = layout.needed();
        Ok(Unbuffered { layout, needed })
    }

    /// The geometry of `view`, which its constructor checked.
    pub(crate) fn of(view: &TensorView<'_>) -> Unbuffered {
        Unbuffered::of_layout(view.layout().clone())
    }

    /// The geometry of a writable `view`.
    pub(crate) fn of_mut(view: &TensorViewMut<'_>) -> Unbuffered {
        Unbuffered::of_layout(view.layout().clone())
    }

    fn of_layout(layout: Layout) -> Unbuffered {
        let needed = layout.needed();
        Unbuffered { layout, needed }
    }

    pub(crate) fn dtype(&self) -> DType {
        self.layout.dtype
    }

    pub(crate) fn shape(&self) -> &[usize] {
        &self.layout.shape
    }

    /// Whether it is the geometry of a new output: row-major from the buffer's start.
    pub(crate) fn is_fresh(&self) -> bool {
        self.layout.offset == 0 && self.layout.dense_range().is_some()
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

    /// Whether `view` has this geometry (dtype, shape, strides, offset): its buffer then
    /// holds the `needed` bytes, which the view checked when it was made.
    pub(crate) fn describes(&self, view: &TensorView<'_>) -> bool {
        *view.layout() == self.layout
    }

    /// [`Self::describes`] for a writable view.
    pub(crate) fn describes_mut(&self, view: &TensorViewMut<'_>) -> bool {
        *view.layout() == self.layout
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
