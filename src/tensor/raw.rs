//! What a kernel call is handed of an operand: its address, shape and strides.

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
