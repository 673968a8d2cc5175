//! The names of things: the op families, the tensors a kernel touches, the largest rank.

use std::fmt;

/// The largest rank of any one tensor. Gather's output may reach `2 * MAX_RANK - 1`.
pub const MAX_RANK: usize = 8;

/// The op families, without attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    /// ONNX ScatterElements / Scatter, OpenVINO ScatterElementsUpdate, PyTorch `scatter_`.
    ScatterElements,
    /// ONNX GatherElements, PyTorch `gather`.
    GatherElements,
    /// ONNX Gather, PyTorch `index_select`.
    Gather,
}

impl OpKind {
    /// The name used in keys and messages (`scatter_elements`, `gather_elements`, `gather`).
    pub const fn name(self) -> &'static str {
        match self {
            OpKind::ScatterElements => "scatter_elements",
            OpKind::GatherElements => "gather_elements",
            OpKind::Gather => "gather",
        }
    }

    /// Every op kind.
    pub const ALL: &'static [OpKind] = &[
        OpKind::ScatterElements,
        OpKind::GatherElements,
        OpKind::Gather,
    ];
}

impl fmt::Display for OpKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A tensor a kernel touches: the four an op takes (a call's arguments; the C ABI's
/// `SjArgs` has one field per each, in [`Operand::TENSORS`] order) and `mean`'s scratch.
/// Messages and printed loop nests name it by [`Operand::name`]; the discriminant is its
/// slot in the operand array of a compiled pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operand {
    /// The tensor read from (gather) or copied and updated (scatter).
    Data = 0,
    /// The integer positions along the axis.
    Indices = 1,
    /// The values scattered.
    Updates = 2,
    /// The result (for a scatter it starts as a copy of data).
    Output = 3,
    /// `mean`'s scratch: wide per-element sums, shaped like the output.
    Sums = 4,
    /// `mean`'s scratch: per-element update counts (i64), shaped like the output.
    Counts = 5,
}

/// Number of operand slots of a compiled pass: one per [`Operand`].
pub const OPERAND_SLOTS: usize = Operand::ALL.len();

impl Operand {
    /// Every operand, by slot.
    pub const ALL: [Operand; 6] = [
        Operand::Data,
        Operand::Indices,
        Operand::Updates,
        Operand::Output,
        Operand::Sums,
        Operand::Counts,
    ];

    /// The tensors an op takes, in the order of the C ABI's `SjArgs` fields; the rest of
    /// [`Operand::ALL`] is scratch.
    pub const TENSORS: [Operand; 4] = [
        Operand::Data,
        Operand::Indices,
        Operand::Updates,
        Operand::Output,
    ];

    /// The name used in messages and printed loop nests.
    pub const fn name(self) -> &'static str {
        match self {
            Operand::Data => "data",
            Operand::Indices => "indices",
            Operand::Updates => "updates",
            Operand::Output => "output",
            Operand::Sums => "sums",
            Operand::Counts => "counts",
        }
    }

    /// Whether this is scratch a call allocates (`mean`'s sums and counts) rather than a
    /// tensor of the op.
    pub const fn is_scratch(self) -> bool {
        matches!(self, Operand::Sums | Operand::Counts)
    }

    /// This operand's slot in the operand array of a compiled pass.
    pub const fn slot(self) -> usize {
        self as usize
    }
}

impl fmt::Display for Operand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
