//! What a kernel call is handed of an operand: its address, shape and strides.

use std::marker::PhantomData;
use std::ops::Range;

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

/// Writable memory held by address and length, as a `&'a mut [u8]` would be, except that
/// its bytes need not be initialized: what a writable view holds, so that a new output can
/// be handed to kernels before its first write without a reference to memory nothing wrote
/// (see [`Place::unwritten`]). Slices of it are made only where its bytes are known to be
/// initialized.
#[derive(Debug)]
pub(crate) struct Place<'a> {
    start: *mut u8,
    len: usize,
    borrow: PhantomData<&'a mut [u8]>,
}

// SAFETY: a `Place` is an exclusive borrow of `len` bytes, like `&mut [u8]`, which is `Send`
// and `Sync`; nothing else can reach them while it lives.
unsafe impl Send for Place<'_> {}
// SAFETY: as above; a shared `Place` gives only addresses, and reads need `&self` of the
// view that owns it.
unsafe impl Sync for Place<'_> {}

impl<'a> From<&'a mut [u8]> for Place<'a> {
    fn from(bytes: &'a mut [u8]) -> Self {
        Place {
            start: bytes.as_mut_ptr(),
            len: bytes.len(),
            borrow: PhantomData,
        }
    }
}

impl<'a> Place<'a> {
    /// The `len` bytes at `start`, which nothing has written yet.
    ///
    /// # Safety
    /// `start` is valid for writes of `len` bytes for `'a`, and nothing else accesses them
    /// meanwhile. Until every byte has been written, neither this place nor any view over
    /// it may be read as a slice: only kernels write through it ([`Self::bytes`],
    /// [`Self::bytes_mut`] and the views' slices assume initialized bytes).
    pub(crate) unsafe fn unwritten(start: *mut u8, len: usize) -> Self {
        Place {
            start,
            len,
            borrow: PhantomData,
        }
    }

    /// Number of bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The address of the first byte.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.start
    }

    /// The addresses held.
    pub(crate) fn span(&self) -> Range<*const u8> {
        let start = self.start.cast_const();
        start..start.wrapping_add(self.len)
    }

    /// A shorter borrow of the same bytes.
    pub(crate) fn reborrow(&mut self) -> Place<'_> {
        Place {
            start: self.start,
            len: self.len,
            borrow: PhantomData,
        }
    }

    /// The bytes of `range`, or `None` if it does not lie inside.
    pub(crate) fn slice(self, range: Range<usize>) -> Option<Place<'a>> {
        if range.start > range.end || range.end > self.len {
            return None;
        }
        Some(Place {
            // In bounds: `range.start <= len`.
            start: self.start.wrapping_add(range.start),
            len: range.end - range.start,
            borrow: PhantomData,
        })
    }

    /// The first `mid` bytes and the rest, or `None` if `mid` is past the end.
    pub(crate) fn split_at(self, mid: usize) -> Option<(Place<'a>, Place<'a>)> {
        let len = self.len;
        let head = Place {
            start: self.start,
            len: mid,
            borrow: PhantomData,
        };
        let tail = self.slice(mid..len)?;
        Some((head, tail))
    }

    /// Writes `from` at byte `at`; `None`, writing nothing, if it does not fit.
    pub(crate) fn write(&mut self, at: usize, from: &[u8]) -> Option<()> {
        let end = at.checked_add(from.len())?;
        if end > self.len {
            return None;
        }
        // SAFETY: `at..end` lies inside the `len` writable bytes this place borrows
        // exclusively (checked above), so it cannot overlap `from`, a shared borrow.
        unsafe {
            std::ptr::copy_nonoverlapping(from.as_ptr(), self.start.add(at), from.len());
        }
        Some(())
    }

    /// The bytes, readable.
    ///
    /// # Safety
    /// Every byte has been written ([`Self::unwritten`]); places made from slices always
    /// have been.
    pub(crate) unsafe fn bytes(&self) -> &[u8] {
        // SAFETY: valid, exclusive and initialized, by `Self::unwritten`'s contract or
        // because the place came from a slice.
        unsafe { std::slice::from_raw_parts(self.start, self.len) }
    }

    /// The bytes, writable.
    ///
    /// # Safety
    /// As for [`Self::bytes`].
    pub(crate) unsafe fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`.
        unsafe { std::slice::from_raw_parts_mut(self.start, self.len) }
    }
}

/// True if two address ranges share a byte (empty ranges share none): the test by which
/// every call refuses an output whose memory overlaps an input's
/// ([`Overlap`](scatterjit_ir::Error::Overlap)), for bindings that check their own buffers.
///
/// ```
/// let bytes = [0u8; 16];
/// assert!(scatterjit::overlaps(bytes[0..8].as_ptr_range(), bytes[4..12].as_ptr_range()));
/// assert!(!scatterjit::overlaps(bytes[0..8].as_ptr_range(), bytes[8..16].as_ptr_range()));
/// ```
pub fn overlaps(a: Range<*const u8>, b: Range<*const u8>) -> bool {
    !a.is_empty() && !b.is_empty() && a.start < b.end && b.start < a.end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_refuse_ranges_and_writes_past_their_end() {
        let mut bytes = [0u8; 8];
        let mut place = Place::from(&mut bytes[..]);
        assert_eq!(place.len(), 8);
        assert!(place.reborrow().slice(2..9).is_none());
        let (start, end) = (5, 4);
        assert!(place.reborrow().slice(start..end).is_none());
        assert!(place.reborrow().split_at(9).is_none());
        assert!(place.write(6, &[1, 2, 3]).is_none());
        assert!(place.write(usize::MAX, &[1]).is_none());
        let (mut head, tail) = place.split_at(3).unwrap();
        assert_eq!((head.len(), tail.len()), (3, 5));
        let mut tail = tail.slice(1..5).unwrap();
        tail.write(0, &[7, 8, 9, 10]).unwrap();
        head.write(1, &[5, 6]).unwrap();
        assert_eq!(bytes, [0, 5, 6, 0, 7, 8, 9, 10]);
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
}
